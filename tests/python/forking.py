"""Test helpers for os.fork(): run a function in a forked child with a time limit (a hang is a
failure, never a hung test run), and run functions in a loop on threads while a test forks."""
import contextlib
import os
import signal
import threading
import time


def wait_child(pid: int, limit_s: float = 30.0):
    """The child's wait status, or 'hung' (then it is killed)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "hung"


def fork_child(fn, limit_s: float = 30.0) -> tuple:
    """Run fn() in a forked child (it leaves with os._exit: exit status 0, or 3 when fn raised):
    (wait status or 'hung', str(what fn returned) or 'raised <Type>: <message>')."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        code = 0
        try:
            msg = str(fn())
        except BaseException as e:  # noqa: BLE001
            msg, code = f"raised {type(e).__name__}: {e}", 3
        os.write(w, msg.encode())
        os._exit(code)
    os.close(w)
    status = wait_child(pid, limit_s)
    out = b""
    if status != "hung":
        while True:
            b = os.read(r, 65536)
            if not b:
                break
            out += b
    os.close(r)
    return status, out.decode()


@contextlib.contextmanager
def hammering(*fns):
    """Each fn() called in a loop on a thread of its own while the block runs; the threads are
    stopped and joined at its end, and an exception one of them raised fails the block."""
    stop = threading.Event()
    started = threading.Barrier(len(fns) + 1)
    errors: list = []

    def loop(fn):
        try:
            started.wait(30)
            while not stop.is_set():
                fn()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=loop, args=(fn,)) for fn in fns]
    for t in threads:
        t.start()
    started.wait(30)
    try:
        yield errors
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not [t for t in threads if t.is_alive()], "a hammering thread did not stop"
    assert not errors, errors


@contextlib.contextmanager
def child_alive(in_child=None):
    """A forked child that runs in_child() (when given; an exception makes it exit 3), says it runs
    (its at-fork hooks have run, as a DataLoader worker's have long done) and lives until the block
    ends; then it must exit with 0."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(ready_r)
        os.close(go_w)
        signal.alarm(60)  # never outlive the test
        code = 0
        try:
            if in_child is not None:
                in_child()
        except BaseException:  # noqa: BLE001
            code = 3
        os.write(ready_w, b"r")
        os.read(go_r, 1)
        os._exit(code)
    os.close(ready_w)
    os.close(go_r)
    try:
        assert os.read(ready_r, 1) == b"r"
        yield pid
    finally:
        os.close(ready_r)
        os.close(go_w)
        assert wait_child(pid) == 0
