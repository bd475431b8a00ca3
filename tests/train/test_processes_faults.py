"""`--processes N` (torchrun, gloo on the CPU) when something goes wrong (issue 45, item 3): a check stopped early
leaves no worker behind (torchrun starts each in a session of its own), more ranks than the machine runs at once are
refused before anything starts, a rank that dies is named with its own end rather than the rank that lost its
connection to it, and a batch field that is not a tensor is named."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from campaign.errors import InputError  # noqa: E402
from campaign.train.accumulation import (  # noqa: E402
    ERROR_RECORD,
    check_accumulation,
    check_fields,
    check_processes,
    launch,
    root_cause,
)

from .test_batch_torchrun import EXAMPLES, SETUP  # noqa: E402

FAULTS = '''
import os
import signal
import threading
import time


def write_pid(name):
    path = os.path.join(PIDS, name)
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)


def hang(model, micro_batches):             # each rank says it is here, then never ends
    write_pid(f"rank{dist.get_rank()}.pid")
    threading.Event().wait()


def die_in_a_collective(model, micro_batches):
    """Rank 1 is killed (as the out-of-memory killer does) while rank 0 waits for it in a collective: rank 0 then
    raises 'Connection closed by peer', after rank 1's end."""
    waiting = os.path.join(PIDS, "rank0-waits")
    if dist.get_rank() == 0:
        open(waiting, "w").close()
        dist.barrier()
    else:
        while not os.path.exists(waiting):
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGKILL)


def hangs():
    return {**reordered(), "accumulate": hang}


def dies():
    return {**reordered(), "accumulate": die_in_a_collective}


def abort_at_exit(model, micro_batches):
    """Rank 1 aborts as the interpreter exits, after the last barrier and the process group's teardown (gloo's
    teardown race under load ended a rank this way in CI)."""
    import atexit
    if dist.get_rank() == 1:
        atexit.register(os.abort)
    global_count(model, micro_batches)


def abort_at_the_start(model, micro_batches):
    if dist.get_rank() == 1:
        os.abort()
    global_count(model, micro_batches)


def aborts_late():
    return {**reordered(), "accumulate": abort_at_exit}


def aborts_early():
    return {**reordered(), "accumulate": abort_at_the_start}


def with_source():
    made = reordered()
    made["batches"] = [{**b, "source": ["web"] * b["input_ids"].shape[0]} for b in made["batches"]]
    return made
'''


@pytest.fixture
def pids(tmp_path: Path) -> Path:
    folder = tmp_path / "pids"
    folder.mkdir()
    return folder


@pytest.fixture
def setup_file(tmp_path: Path, pids: Path) -> str:
    path = tmp_path / "faults_setup.py"
    path.write_text(f"EXAMPLES = {str(EXAMPLES)!r}\nPIDS = {str(pids)!r}\n" + SETUP + FAULTS, encoding="utf-8")
    return str(path)


def running(pid: int) -> bool:
    """Whether a process runs (a zombie waiting for its parent to reap it does not): psutil if installed, else
    /proc."""
    try:
        import psutil
    except ImportError:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_for(paths: list[Path], proc: subprocess.Popen, limit: float = 300) -> None:
    """Until every path exists (the workers wrote them), the process ended, or `limit` seconds passed."""
    deadline = time.monotonic() + limit
    while not all(p.exists() for p in paths) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)


def limit() -> int:
    """Ranks this machine runs at once: one per GPU under NCCL, else one per CPU core this process may use."""
    if torch.cuda.is_available():
        return torch.cuda.device_count()
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# -- a: nothing left running -----------------------------------------------------------------------------------------

def test_an_interrupted_check_leaves_no_torchrun_worker_running(setup_file, pids):
    """Ctrl-C on `campaign batch --processes 2` while both ranks run (each wrote its pid): both are gone when the
    command has exited. Before, only torchrun was killed and the ranks, each in a session of its own, ran on."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen([sys.executable, "-m", "campaign", "batch", f"{setup_file}:hangs", "--processes", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    files = [pids / "rank0.pid", pids / "rank1.pid"]
    workers: list[int] = []
    try:
        wait_for(files, proc)
        assert proc.poll() is None, proc.communicate()
        workers = [int(f.read_text()) for f in files]
        assert all(running(pid) for pid in workers)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, (proc.returncode, err)        # interrupted
        assert [pid for pid in workers if running(pid)] == []
    finally:                                   # whatever failed above, end what this test started
        for pid in workers:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


ROOT = """
import subprocess, sys
child = "import os, sys, time\\np = sys.argv[1]\\nopen(p + '.tmp', 'w').write(str(os.getpid()))\\n" \\
        "os.replace(p + '.tmp', p)\\ntime.sleep(600)"
kids = [subprocess.Popen([sys.executable, "-I", "-S", "-c", child, p], start_new_session=True) for p in sys.argv[1:]]
for k in kids:
    k.wait()
"""


def test_a_timeout_kills_the_launcher_and_every_process_under_it(tmp_path):
    """A stand-in for torchrun (a parent that starts two children, each in a session of its own, as torchrun starts
    its workers) that never ends: past the timeout, the parent and both children are gone. Should the children not
    have started within the timeout on a loaded machine, it is tried again with a longer one."""
    for timeout in (1, 4, 16):
        folder = tmp_path / f"after-{timeout}s"
        folder.mkdir()
        files = [folder / "a.pid", folder / "b.pid"]
        with pytest.raises(InputError, match=f"the stand-in did not finish in {timeout} s"):
            launch([sys.executable, "-I", "-S", "-c", ROOT, *map(str, files)], dict(os.environ), timeout,
                   "the stand-in")
        started = [int(f.read_text()) for f in files if f.exists()]
        assert [pid for pid in started if running(pid)] == []
        if len(started) == 2:
            break
    assert len(started) == 2, "the stand-in's children never started"


def test_a_launcher_that_ends_by_itself_is_left_alone():
    """The clean case: the exit code and what it wrote on stderr, no timeout."""
    code, err = launch([sys.executable, "-I", "-S", "-c", "import sys; sys.stderr.write('done'); sys.exit(3)"],
                       dict(os.environ), 60, "the stand-in")
    assert (code, err) == (3, "done")


# -- b: no more ranks than the machine runs at once ------------------------------------------------------------------

@pytest.mark.parametrize("command", ["batch", "check"])
def test_more_processes_than_the_machine_runs_are_refused_before_anything_starts(cli, tmp_path, command):
    n = limit()
    marker = tmp_path / "imported"
    setup = tmp_path / "setup.py"
    setup.write_text(f"open({str(marker)!r}, 'w').write('ran')\ndef make_setup():\n    pass\n", encoding="utf-8")
    for processes in (n + 1, 100_000):                  # 100000 took 96 s and more to fail on 2 cores
        res = cli(command, f"{setup}:make_setup", "--processes", str(processes))
        assert res.code == 2 and res.err.count("\n") == 1, (res.code, res.err)
        assert f"--processes {processes}: this machine runs {n} at once" in res.err, res.err
        assert f"give --processes {n} or fewer" in res.err
    assert not marker.exists()         # neither this process nor a worker loaded the setup: nothing was launched
    with pytest.raises(InputError, match=f"this machine runs {n} at once"):
        check_accumulation(f"{setup}:make_setup", processes=n + 1)


def test_as_many_processes_as_the_machine_runs_are_accepted():
    """The clean case (the torchrun tests run 2 processes on 2 cores)."""
    for processes in range(1, limit() + 1):
        check_processes(processes)


# -- c: the rank that died first, with its own end -------------------------------------------------------------------

def test_a_rank_that_dies_is_named_not_the_rank_that_lost_its_connection(setup_file, cli):
    res = cli("batch", f"{setup_file}:dies", "--processes", "2")
    assert res.code == 2 and res.err.count("\n") == 1, (res.code, res.err)
    assert "rank 1 of 2 died of signal 9 (SIGKILL) without raising an exception" in res.err, res.err
    assert "Connection closed" not in res.err and "rank 0" not in res.err


def test_a_rank_that_ends_badly_after_the_result_is_complete_does_not_fail_the_check(setup_file, cli):
    """Every rank passed the last barrier and rank 0 wrote the result: a crash in the teardown after it changes
    nothing (the check passes); the same abort before the barrier is named."""
    res = cli("batch", f"{setup_file}:aborts_late", "--processes", "2")
    assert res.code in (0, 1) and "rank" not in res.err, (res.code, res.err)
    res = cli("batch", f"{setup_file}:aborts_early", "--processes", "2")
    assert res.code == 2 and "rank 1 of 2 died of signal 6 (SIGABRT)" in res.err, (res.code, res.err)


REPORT = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
campaign.train.ddp_worker FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-05_12:38:20
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : {code0} (pid: 9678)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-05_12:38:20
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : {code1} (pid: 9679)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 9679
============================================================"""


def record(folder: Path, rank: int, when: float, line: str) -> None:
    (folder / ERROR_RECORD.format(rank=rank)).write_text(json.dumps({"rank": rank, "time": when, "line": line}))


LOST = ("rank 0 of the torchrun check raised RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by "
        "peer [127.0.0.1]:7601")


def test_the_root_cause_is_the_rank_that_failed_on_its_own_earliest_first(tmp_path):
    report = REPORT.format(code0=1, code1=-9)
    # rank 0 lost its connection (its own record), rank 1 was killed and recorded nothing: rank 1, by its signal
    record(tmp_path, 0, 1.0, LOST)
    assert root_cause(tmp_path, report, 2).startswith("rank 1 of 2 died of signal 9 (SIGKILL) without raising")
    # a rank's own exception comes before a rank that only lost its connection, even a later one
    record(tmp_path, 1, 2.0, "setup.py: accumulate raised ValueError: shard 1 holds no labels on rank 1 of 2")
    assert root_cause(tmp_path, report, 2).endswith("shard 1 holds no labels on rank 1 of 2")
    # two ranks failing on their own: the earlier
    record(tmp_path, 0, 1.5, "setup.py: accumulate raised KeyError: 'labels' on rank 0 of 2")
    assert root_cause(tmp_path, report, 2).endswith("KeyError: 'labels' on rank 0 of 2")
    # an exit without an exception (os._exit(3)), the other rank ended by torchrun's SIGTERM
    alone = tmp_path / "exit"
    alone.mkdir()
    said = root_cause(alone, REPORT.format(code0=-15, code1=3), 2)
    assert said is not None and said.startswith("rank 1 of 2 exited with code 3 without reporting an error")


def test_no_failure_is_no_root_cause_and_the_only_failure_stands(tmp_path):
    """The clean cases: nothing failed; one rank failed on its own and torchrun ended the other (SIGTERM)."""
    assert root_cause(tmp_path, "", 2) is None
    record(tmp_path, 1, 3.0, "setup.py: the step raised ValueError: bad batch on rank 1 of 2")
    assert root_cause(tmp_path, REPORT.format(code0=-15, code1=1), 2) == \
        "setup.py: the step raised ValueError: bad batch on rank 1 of 2"


# -- d: a batch field that is not a tensor ---------------------------------------------------------------------------

def test_a_field_that_is_not_a_tensor_is_named_before_torchrun_starts(setup_file, cli):
    for args in (("--processes", "2"), ()):                 # the same line with and without torchrun
        res = cli("batch", f"{setup_file}:with_source", *args)
        assert res.code == 2 and res.err.count("\n") == 1, (res.code, res.err)
        assert "micro-batch 1's field 'source' is a list, not a tensor" in res.err, res.err
        assert "leave it out of the setup's batches" in res.err and "rank" not in res.err


def test_batches_of_tensors_pass_the_field_check():
    """The clean case: the example's micro-batches (input_ids, attention_mask, labels)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        from train_setup import make_setup
    finally:
        sys.path.remove(str(EXAMPLES))
    assert check_fields(make_setup()["batches"]) == {"input_ids", "attention_mask", "labels"}
