"""The run store on PostgreSQL: the same data functions as on SQLite.

Uses ``LAB_TEST_POSTGRES_URL`` when set; otherwise starts a private PostgreSQL cluster
from Debian's binaries (on a free loopback port, as the ``postgres`` user); skipped with
the reason when neither is possible.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from db import migrations, store
from db.engine import make_engine
from db.models import RunStatus
from lab import experiments
from lab.specs import load_preset
from services.supervisor import find_free_port

pytestmark = pytest.mark.integration


def _private_cluster() -> Iterator[str]:
    binaries = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not binaries:
        pytest.skip("no PostgreSQL reachable: set LAB_TEST_POSTGRES_URL or install Debian's postgresql")
    try:
        postgres_user = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("Debian's postgresql is installed without its 'postgres' user")
    bin_dir = os.path.dirname(binaries[-1])
    data_dir = tempfile.mkdtemp(prefix="lab-pg-")
    os.chown(data_dir, postgres_user.pw_uid, postgres_user.pw_gid)
    port = find_free_port()

    def as_postgres(*argv: str) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        return subprocess.run([*prefix, *argv], capture_output=True, text=True, timeout=120)

    init = as_postgres(f"{bin_dir}/initdb", "-D", data_dir, "-U", "lab", "--auth=trust")
    if init.returncode != 0:
        pytest.skip(f"could not create a private PostgreSQL cluster: {init.stderr[-500:]}")
    start = as_postgres(f"{bin_dir}/pg_ctl", "-D", data_dir, "-w", "-l", f"{data_dir}/log",
                        "-o", f"-p {port} -h 127.0.0.1 -k {data_dir}", "start")
    if start.returncode != 0:
        pytest.skip(f"could not start a private PostgreSQL server: {start.stderr[-500:]}")
    try:
        yield f"postgresql+psycopg://lab@127.0.0.1:{port}/postgres"
    finally:
        as_postgres(f"{bin_dir}/pg_ctl", "-D", data_dir, "-m", "immediate", "stop")
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def postgres_engine():  # noqa: ANN201
    url = os.environ.get("LAB_TEST_POSTGRES_URL")
    cluster = None if url else _private_cluster()
    if cluster is not None:
        url = next(cluster)
    engine = make_engine(url)
    migrations.upgrade(engine)
    yield engine
    engine.dispose()
    if cluster is not None:
        next(cluster, None)


def test_queue_and_figures_on_postgresql(postgres_engine) -> None:  # noqa: ANN001
    spec = load_preset("seed-exp1", quick=True)
    with Session(postgres_engine) as session:
        ids = [run.id for run in experiments.enqueue_experiment(session=session, spec=spec, tags="pg").runs]
    first = store.claim_next_run(engine=postgres_engine, worker_pid=os.getpid())
    assert first == ids[0]
    store.set_run_status(engine=postgres_engine, run_id=first, status=RunStatus.DONE, req_per_s=1.5,
                         count_check={"requests": {"difference": 0}})
    store.save_run_series(engine=postgres_engine, run_id=first, series={"time_s": [0.0, 1.0]})
    with Session(postgres_engine) as session:
        assert store.request_cancel(session=session, run_id=ids[1]) == RunStatus.CANCELLED
        done = store.list_runs(session=session, statuses=[RunStatus.DONE], tag="pg")
        assert [run.id for run in done] == [first] and done[0].req_per_s == 1.5
        assert done[0].count_check == {"requests": {"difference": 0}}
        assert store.get_run_series(session=session, run_id=first).series["time_s"] == [0.0, 1.0]
    with postgres_engine.connect() as connection:
        assert migrations.current_version(connection) == migrations.LATEST_VERSION
        assert connection.execute(text("SELECT count(*) FROM runs")).scalar() == len(ids)
