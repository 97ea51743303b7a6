"""Lab members: who is acting, what their role lets them do, and how a name is kept.

Streamlit-free. The web lab hands in what sign-in says (``st.user``) and the ``[roles]``
table of the secrets file; the CLI asks the operating system. With sign-in off the lab is
one trusted user on a laptop: everyone may do everything, as before roles existed.

Roles (``[roles]`` in ``.streamlit/secrets.toml``)::

    [roles]
    admin = ["alice@lab.example"]      # may act on every run, start/stop services, see workers
    member = ["bob@lab.example"]       # optional: without it, everyone signed in is a member

A member may cancel, delete and retag the runs they launched, add notes to any run and
run any run again (the copy is theirs); an admin may do all of it to every run.
"""

from __future__ import annotations

import getpass
import os
import tomllib
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from db.models import UNKNOWN_LAUNCHER

ADMIN = "admin"
MEMBER = "member"
ROLES = (ADMIN, MEMBER)
# Signed in, but not on a ``member`` list that the settings give: may not use the lab.
OUTSIDER = "outsider"
UNKNOWN = UNKNOWN_LAUNCHER
NAME_MAX_CHARS = 200

# What each action on a run needs: its launcher (or an admin), or only being a member.
OWNER_ACTIONS = ("cancel", "delete", "tag")
MEMBER_ACTIONS = ("note", "run_again")
RUN_ACTIONS = OWNER_ACTIONS + MEMBER_ACTIONS
ACTION_WORDS = {
    "cancel": "cancel",
    "delete": "delete",
    "tag": "retag",
    "note": "add notes to",
    "run_again": "run again",
}


class RolesError(ValueError):
    """The ``[roles]`` settings cannot be used (an unknown role, a value that is not a list of names)."""


def clean_name(value: Any, *, max_chars: int = NAME_MAX_CHARS) -> str:
    """A name or e-mail fit to store and show: no control or format characters (newlines,
    escapes, zero-width and direction overrides), whitespace runs as one space, at most
    ``max_chars``. Markdown and HTML are kept as typed: pages show names as plain text."""
    text = "" if value is None else str(value)
    kept = "".join(
        " " if char.isspace() else char
        for char in text
        if char.isspace() or unicodedata.category(char) not in ("Cc", "Cf", "Cs", "Co", "Cn")
    )
    return " ".join(kept.split())[:max_chars]


def os_user() -> str:
    """The operating-system user running this process (the CLI's launcher), else "unknown"."""
    try:
        return clean_name(getpass.getuser()) or UNKNOWN
    except (KeyError, OSError):  # no passwd entry and no USER/LOGNAME: a bare container
        return UNKNOWN


@dataclass(frozen=True)
class RolesConfig:
    """Who is an admin, and who is a member (None: everyone signed in)."""

    admins: frozenset[str] = frozenset()
    members: frozenset[str] | None = None

    def role_of(self, name: str) -> str:
        key = name.casefold()
        if key in self.admins:
            return ADMIN
        if self.members is None or key in self.members:
            return MEMBER
        return OUTSIDER


def _names(role: str, value: Any) -> frozenset[str]:
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, (list, tuple)) or not all(isinstance(item, str) for item in values):
        raise RolesError(f"[roles] {role} must be a list of e-mail addresses or names")
    return frozenset(clean_name(item).casefold() for item in values if clean_name(item))


def parse_roles(table: Mapping[str, Any] | None) -> RolesConfig:
    """The ``[roles]`` table as a RolesConfig; an unknown role name is a RolesError."""
    table = dict(table or {})
    for role in table:
        if role not in ROLES:
            raise RolesError(
                f"unknown role {str(role)[:60]!r} in [roles] of the secrets file (the roles are {', '.join(ROLES)})"
            )
    members = _names(MEMBER, table[MEMBER]) if MEMBER in table else None
    return RolesConfig(admins=_names(ADMIN, table.get(ADMIN, [])), members=members)


def secrets_paths(project_root: Path, environ: Mapping[str, str] | None = None) -> list[Path]:
    """Where Streamlit reads secrets from, in its order: ``STREAMLIT_SECRETS_FILES`` when set,
    else the user's ``~/.streamlit/secrets.toml`` then the project's."""
    environ = os.environ if environ is None else environ
    if environ.get("STREAMLIT_SECRETS_FILES"):
        return [Path(part) for part in environ["STREAMLIT_SECRETS_FILES"].split()]
    return [Path.home() / ".streamlit" / "secrets.toml", project_root / ".streamlit" / "secrets.toml"]


def read_secrets(paths: Iterable[Path]) -> dict[str, Any]:
    """The secrets files merged (later ones win, as in Streamlit); missing files are skipped."""
    merged: dict[str, Any] = {}
    for path in paths:
        if path.is_file():
            with path.open("rb") as handle:
                merged.update(tomllib.load(handle))
    return merged


def check_settings_at_start(project_root: Path) -> str | None:
    """One line saying why the sign-in settings cannot be used, or None when they can."""
    try:
        secrets = read_secrets(secrets_paths(project_root))
        parse_roles(secrets.get("roles"))
    except (RolesError, tomllib.TOMLDecodeError, OSError) as error:
        return f"error: {' '.join(str(error).split())}"
    return None


@dataclass(frozen=True)
class Member:
    """Who acts: ``name`` (e-mail, subject or a typed name; stored and shown), ``role``, and
    whether sign-in is on (roles only apply then)."""

    name: str
    role: str = ADMIN
    signed_in: bool = False

    @property
    def is_admin(self) -> bool:
        return not self.signed_in or self.role == ADMIN

    @property
    def may_use_lab(self) -> bool:
        return not self.signed_in or self.role in ROLES


def member_from_sign_in(claims: Mapping[str, Any], roles: RolesConfig) -> Member:
    """The signed-in member from the provider's claims: the e-mail, else the subject."""
    name = clean_name(claims.get("email") or claims.get("sub")) or UNKNOWN
    return Member(name=name, role=roles.role_of(name), signed_in=True)


def sign_in_age_s(claims: Mapping[str, Any], now_s: float) -> float | None:
    """Seconds since the provider signed this member in: its ``auth_time`` claim, else the ID
    token's ``iat``; None when the claims carry neither (the age cannot be told)."""
    for claim in ("auth_time", "iat"):
        value = claims.get(claim)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return max(0.0, now_s - float(value))
    return None


def expired_sign_in_message(claims: Mapping[str, Any], *, max_age_h: float, now_s: float) -> str | None:
    """Why this sign-in must be renewed (older than ``max_age_h``), or None while it is valid."""
    age_s = sign_in_age_s(claims, now_s)
    if age_s is None or age_s <= max_age_h * 3600:
        return None
    return f"Your sign-in is {age_s / 3600:.1f} h old, over this lab's limit of {max_age_h:g} h: sign in again."


def member_without_sign_in(name: Any) -> Member:
    """Sign-in off: the name given in the web lab (or "unknown"); one trusted user, no roles."""
    return Member(name=clean_name(name) or UNKNOWN, role=ADMIN, signed_in=False)


@dataclass(frozen=True)
class Decision:
    """Whether an action is allowed, and the reason shown beside a disabled control when not."""

    allowed: bool
    reason: str = ""


ALLOWED = Decision(True)


def same_person(first: str | None, second: str | None) -> bool:
    if not first or not second:  # an unknown name is nobody, not everybody
        return False
    return first.casefold() == second.casefold()


def may_act_on_run(member: Member, *, action: str, launched_by: str | None) -> Decision:
    """May ``member`` do ``action`` (one of RUN_ACTIONS) to a run ``launched_by`` someone?"""
    if action not in RUN_ACTIONS:
        raise ValueError(f"unknown run action {action!r}")
    if not member.signed_in:
        return ALLOWED
    if not member.may_use_lab:
        return Decision(False, f"{member.name} is not a member of this lab")
    if member.is_admin or action in MEMBER_ACTIONS or same_person(member.name, launched_by):
        return ALLOWED
    return Decision(
        False, f"only {launched_by or UNKNOWN} (who launched it) or an admin may {ACTION_WORDS[action]} this run"
    )


def may_manage_lab(member: Member) -> Decision:
    """Services (start/stop) and Workers: admins only when sign-in is on."""
    if member.is_admin:
        return ALLOWED
    return Decision(False, "only an admin may start or stop services and manage workers")


def may_import(member: Member) -> Decision:
    """Importing another tool's results adds runs, like launching: any member (everyone with sign-in off)."""
    if member.may_use_lab:
        return ALLOWED
    return Decision(False, f"{member.name} is not a member of this lab: only members may import results")
