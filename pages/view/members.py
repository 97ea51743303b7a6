"""Lab members in the web lab: who is acting, the sign-in screens, the name prompt, the
"launched by" filter, a run's notes thread and audit trail. Names are shown as plain text.

Roles and permissions are decided in ``lab.members``; this module only reads Streamlit's
``st.user`` and ``st.secrets`` and draws.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import streamlit as st

from lab.members import (
    UNKNOWN,
    Decision,
    Member,
    RolesConfig,
    RolesError,
    expired_sign_in_message,
    may_act_on_run,
    may_manage_lab,
    member_from_sign_in,
    member_without_sign_in,
    os_user,
    parse_roles,
)
from lab.settings import get_settings
from pages.view.names import local_time
from pages.view.text import plain

NAME_KEY = "member_name"
ANYONE = "anyone"
MINE = "mine"


def sign_in_configured() -> bool:
    """True when an OIDC provider is set in the secrets file (``[auth]``): a shared lab."""
    try:
        return "auth" in st.secrets
    except Exception:
        return False


def roles() -> RolesConfig:
    """The ``[roles]`` settings (RolesError when they name an unknown role)."""
    try:
        table = st.secrets.get("roles")
    except Exception:
        table = None
    return parse_roles(dict(table) if table is not None else None)


def signed_in() -> bool:
    return bool(st.user.get("is_logged_in", False))


def expired_sign_in() -> str | None:
    """Why this session's sign-in must be renewed, or None. Checked on every rerun: Streamlit
    reads its identity cookie (kept 30 days) only when the browser connects."""
    return expired_sign_in_message(st.user.to_dict(), max_age_h=get_settings().sign_in_max_age_h, now_s=time.time())


def current_member() -> Member:
    """Who acts in this browser session: the signed-in member, or (sign-in off) the name
    given once in this session, else the operating-system user running the lab (said in the sidebar)."""
    if sign_in_configured():
        if not signed_in() or expired_sign_in() is not None:  # nobody acts until signed in again
            return Member(name=UNKNOWN, role="", signed_in=True)
        try:
            config = roles()
        except RolesError:
            config = RolesConfig(members=frozenset())  # refused at start; nobody acts meanwhile
        return member_from_sign_in(st.user.to_dict(), config)
    return member_without_sign_in(st.session_state.get(NAME_KEY) or os_user())


def sign_in_screen() -> None:
    """All a visitor sees before signing in, whatever URL they opened."""
    st.title("Serving Lab")
    st.write("This lab is shared: sign in to use it.")
    st.button("Sign in", on_click=st.login, type="primary", key="sign_in")


def sign_in_again_screen(message: str) -> None:
    """All a member whose sign-in expired sees: why, and the way back in."""
    st.title("Serving Lab")
    st.info(message)
    st.button("Sign in again", on_click=st.login, type="primary", key="sign_in")


def refused_screen(message: str) -> None:
    """The lab refused this session (settings unusable, not a member): why, and sign-out."""
    st.title("Serving Lab")
    st.error(plain(message))
    if sign_in_configured() and signed_in():
        st.button("Sign out", on_click=st.logout, key="sign_out_refused")


def account_box(member: Member) -> None:
    """The sidebar's "who am I": the signed-in member and sign-out, or the name prompt."""
    if member.signed_in:
        st.caption(f":material/person: {plain(member.name)} ({member.role})")
        st.button("Sign out", on_click=st.logout, key="sign_out")
        return
    name = st.session_state.get(NAME_KEY)
    if name:
        st.caption(f":material/person: {plain(name)} (this browser session)")
        if st.button("Change name", key="change_member_name"):
            st.session_state.pop(NAME_KEY, None)
            st.rerun()
        return
    typed = st.text_input(
        "Your name (recorded on the runs you launch)",
        key="member_name_input",
        help="Asked once per browser session; not a login.",
    )
    if typed.strip():
        st.session_state[NAME_KEY] = member_without_sign_in(typed).name
        st.rerun()
    st.caption(f"Until then, what you launch is recorded as launched by {plain(os_user())} (the user running the lab).")


def person_filter(container: Any, names: Sequence[str], *, key: str) -> str | None:
    """A "launched by" select (anyone, mine, or one name); the name to filter on, or None."""
    member = current_member()
    choices = [ANYONE, MINE, *[name for name in names if name]]
    chosen = container.selectbox(
        "Launched by",
        choices,
        key=key,
        format_func=lambda value: {ANYONE: "anyone", MINE: f"mine ({member.name})"}.get(value, value),
    )
    if chosen == ANYONE:
        return None
    return member.name if chosen == MINE else chosen


def run_permission(action: str, launched_by: str | None) -> Decision:
    """May the current member do ``action`` to a run launched by ``launched_by``?"""
    return may_act_on_run(current_member(), action=action, launched_by=launched_by)


def lab_permission() -> Decision:
    """May the current member start or stop services and manage workers?"""
    return may_manage_lab(current_member())


def notes_thread(legacy_note: str | None, notes: Sequence[Any]) -> None:
    """A run's notes, oldest first: author, time, text (plain text, never Markdown)."""
    if legacy_note:
        st.caption("unknown · before notes were threaded")
        st.text(legacy_note)
    for note in notes:
        st.caption(f"{plain(note.author)} · {local_time(note.created_at)}")
        st.text(note.text)
    if not legacy_note and not notes:
        st.caption("No notes yet.")


def audit_trail(actions: Sequence[Any]) -> None:
    """Who cancelled, deleted, tagged, noted or re-ran the run, and when."""
    if not actions:
        st.caption("Nobody has acted on this run yet.")
        return
    for action in actions:
        st.caption(
            f"{local_time(action.at)} · {plain(action.actor)} · {plain(action.action.replace('_', ' '))}"
            + (f": {plain(action.detail)}" if action.detail else "")
        )
