"""A private PostgreSQL cluster from Debian's binaries (tests/integration/conftest.py starts one
per test run and shares it)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile

import pytest

from services.processes import find_free_port


class PostgresCluster:
    """A private PostgreSQL cluster from Debian's binaries, on a free loopback port, run as
    the ``postgres`` user; ``stop`` and ``start`` let a test take it away and bring it back
    (an outage). Skips the test with the reason when it cannot be made."""

    def __init__(self) -> None:
        binaries = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        if not binaries:
            pytest.skip("no PostgreSQL reachable: set LAB_TEST_POSTGRES_URL or install Debian's postgresql")
        try:
            postgres_user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("Debian's postgresql is installed without its 'postgres' user")
        self.bin_dir = os.path.dirname(binaries[-1])
        self.data_dir = tempfile.mkdtemp(prefix="lab-pg-")
        os.chown(self.data_dir, postgres_user.pw_uid, postgres_user.pw_gid)
        self.port = find_free_port()
        self.url = f"postgresql+psycopg://lab@127.0.0.1:{self.port}/postgres"
        init = self._as_postgres(f"{self.bin_dir}/initdb", "-D", self.data_dir, "-U", "lab", "--auth=trust")
        if init.returncode != 0:
            pytest.skip(f"could not create a private PostgreSQL cluster: {init.stderr[-500:]}")
        start = self.start()
        if start.returncode != 0:
            pytest.skip(f"could not start a private PostgreSQL server: {start.stderr[-500:]}")

    def _as_postgres(self, *argv: str) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        return subprocess.run([*prefix, *argv], capture_output=True, text=True, timeout=120)

    def start(self) -> subprocess.CompletedProcess[str]:
        return self._as_postgres(
            f"{self.bin_dir}/pg_ctl",
            "-D",
            self.data_dir,
            "-w",
            "-l",
            f"{self.data_dir}/log",
            "-o",
            f"-p {self.port} -h 127.0.0.1 -k {self.data_dir}",
            "start",
        )

    def stop(self, mode: str = "fast") -> subprocess.CompletedProcess[str]:
        return self._as_postgres(f"{self.bin_dir}/pg_ctl", "-D", self.data_dir, "-m", mode, "stop")

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.data_dir, ignore_errors=True)
