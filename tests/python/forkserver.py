"""A fork server for the tests that start the same child program dozens of times (the SIGKILL
crash loops): one server process imports the heavy modules once (luminamoon, and with it torch:
~2-3 s of CPU per interpreter on the CI machine), then forks a child per run, which runs the
program as ``python SCRIPT ARGS`` or ``python -m MODULE ARGS`` would (``runpy``, ``sys.argv``,
``sys.path[0]``, the environment and working folder of the request, stdin from /dev/null, stdout
and stderr to the test's pipes).  The child is a real process running the real program: it is
killed with a real SIGKILL, and its exit status comes back as ``subprocess`` gives it (-9).

What differs from a fresh interpreter: the modules the server preloaded are already imported
(their import-time work, e.g. environment variables read at import, happened in the server), so
use it only for programs whose behaviour under test does not depend on that; tests of a fresh
interpreter's start-up keep ``subprocess``.  At the child's end, like an interpreter's exit:
non-daemon threads are joined, atexit handlers run, stdio is flushed, then ``os._exit``.

    with ForkServer() as fs:
        p = fs.popen([CHILD_SCRIPT, "arg"], env={**os.environ, "X": "1"})
        p.stdout.readline(); p.send_signal(signal.SIGKILL); p.wait(timeout=60)

Protocol (a SOCK_SEQPACKET socket pair, one JSON message a packet): a request carries the child's
stdout and stderr write ends as SCM_RIGHTS; the server answers {"id", "pid"} or {"id", "error"},
and {"exit": pid, "code": returncode} when it reaps a child.
"""
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading


class ForkedProcess:
    """The subset of subprocess.Popen the tests use: pid, stdout, stderr (text pipes), poll, wait,
    send_signal, kill, communicate, returncode."""

    def __init__(self, pid, stdout, stderr):
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr
        self.returncode = None
        self._done = threading.Event()

    def _exited(self, code):
        self.returncode = code
        self._done.set()

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(f"forked pid {self.pid}", timeout)
        return self.returncode

    def send_signal(self, sig):
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout=None):
        out, err = [None], [None]
        readers = [threading.Thread(target=lambda f, acc: acc.append(f.read()), args=(f, acc), daemon=True)
                   for f, acc in ((self.stdout, out), (self.stderr, err)) if f is not None]
        for t in readers:
            t.start()
        for t in readers:
            t.join(timeout)
            if t.is_alive():
                raise subprocess.TimeoutExpired(f"forked pid {self.pid}", timeout)
        self.wait(timeout)
        for f in (self.stdout, self.stderr):
            if f is not None:
                f.close()
        return out[-1], err[-1]


class ForkServer:
    def __init__(self, preload=("luminamoon.data",)):
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), ",".join(preload),
                                       str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                                      stdin=subprocess.DEVNULL)
        theirs.close()
        self._sock = mine
        self._lock = threading.Lock()
        self._next = 0
        self._replies = {}  # request id -> reply, handed over under self._cv
        self._procs = {}  # pid -> ForkedProcess
        self._early = {}  # pid -> returncode of a child reaped before its spawn reply was handled
        self._cv = threading.Condition()
        hello = self._sock.recv(1 << 16)
        if not hello:
            raise RuntimeError(f"fork server failed to start (exit {self._proc.wait()})")
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        while True:
            try:
                msg = self._sock.recv(1 << 16)
            except OSError:
                msg = b""
            with self._cv:
                if not msg:  # the server is gone: every child still running is lost to us
                    for p in self._procs.values():
                        if p.returncode is None:
                            p._exited(-999)
                    self._replies[None] = {"error": "fork server exited"}
                    self._cv.notify_all()
                    return
                m = json.loads(msg)
                if "exit" in m:
                    p = self._procs.pop(m["exit"], None)
                    if p is None:
                        self._early[m["exit"]] = m["code"]
                    else:
                        p._exited(m["code"])
                else:
                    self._replies[m["id"]] = m
                    self._cv.notify_all()

    def popen(self, argv, env=None, cwd=None, stdout=True):
        """Start argv ([script, args...] or ["-m", module, args...]) in a forked child; text pipes
        (stdout=False: the child's stdout goes to /dev/null, like subprocess.DEVNULL)."""
        out_r, out_w = os.pipe() if stdout else (None, os.open(os.devnull, os.O_WRONLY))
        err_r, err_w = os.pipe()
        try:
            with self._cv:
                rid = self._next
                self._next += 1
            req = {"id": rid, "argv": list(map(str, argv)), "env": dict(os.environ if env is None else env),
                   "cwd": os.path.abspath(cwd or os.getcwd())}
            with self._lock:
                socket.send_fds(self._sock, [json.dumps(req).encode()], [out_w, err_w])
        finally:
            os.close(out_w)
            os.close(err_w)
        with self._cv:
            while rid not in self._replies and None not in self._replies:
                self._cv.wait()
            rep = self._replies.pop(rid, None) or self._replies[None]
            if "error" in rep:
                for fd in (out_r, err_r):
                    if fd is not None:
                        os.close(fd)
                raise RuntimeError(rep["error"])
            p = ForkedProcess(rep["pid"], io.open(out_r, "r", encoding="utf-8", errors="replace") if stdout else None,
                              io.open(err_r, "r", encoding="utf-8", errors="replace"))
            if rep["pid"] in self._early:
                p._exited(self._early.pop(rep["pid"]))
            else:
                self._procs[rep["pid"]] = p
        return p

    def run(self, argv, env=None, cwd=None, timeout=None):
        """subprocess.run(..., capture_output=True, text=True) of a forked child."""
        p = self.popen(argv, env=env, cwd=cwd)
        try:
            out, err = p.communicate(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(30)
            raise
        return subprocess.CompletedProcess(list(argv), p.returncode, out, err)

    def close(self):
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ------------------------------------------------------------------------- the server

def _child(sock, wake, req, fds):
    """In the forked child: become the requested program; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sock.close()
        for fd in wake:
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in fds:
            os.close(fd)
        os.environ.clear()
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        argv = req["argv"]
        import runpy
        try:
            if argv[0] == "-m":
                sys.argv = [argv[1]] + argv[2:]
                sys.path[0] = req["cwd"]
                runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
            else:
                sys.argv = argv
                sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
                runpy.run_path(argv[0], run_name="__main__")
            code = 0
        except SystemExit as e:
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code
            else:
                print(e.code, file=sys.stderr)
                code = 1
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
        # an interpreter's exit: non-daemon threads joined, atexit handlers, stdio flushed
        import threading as _t
        _t._shutdown()
        import atexit
        atexit._run_exitfuncs()
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:
                pass
        os._exit(code & 0xFF)


def _serve(preload, fd):
    for mod in filter(None, preload.split(",")):
        __import__(mod)
    sock = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *a: None)
    signal.set_wakeup_fd(wake_w)
    sock.send(b'{"hello": 1}')
    alive = True
    while True:
        try:
            ready = select.select([sock, wake_r] if alive else [wake_r], [], [], 1.0)[0]
        except InterruptedError:
            ready = []
        if wake_r in ready:
            os.read(wake_r, 4096)
        while True:  # reap every child that ended
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if not pid:
                break
            if alive:
                try:
                    sock.send(json.dumps({"exit": pid, "code": os.waitstatus_to_exitcode(status)}).encode())
                except OSError:
                    alive = False
        if not alive:
            try:
                os.waitpid(-1, 0)  # the client is gone: wait for the children still running, then go
            except ChildProcessError:
                return
            continue
        if sock in ready:
            try:
                msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 4)
            except OSError:
                msg, fds = b"", []
            if not msg:
                alive = False
                continue
            req = json.loads(msg)
            try:
                pid = os.fork()
            except OSError as e:
                for f in fds:
                    os.close(f)
                sock.send(json.dumps({"id": req["id"], "error": f"fork: {e}"}).encode())
                continue
            if pid == 0:
                _child(sock, (wake_r, wake_w), req, fds)
            for f in fds:
                os.close(f)
            sock.send(json.dumps({"id": req["id"], "pid": pid}).encode())


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
