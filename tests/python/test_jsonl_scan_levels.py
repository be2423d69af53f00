"""The JSON Lines scanner (core/src/jsonl_scan.c) finds the plain-ASCII runs of strings 32
bytes at a time with AVX2 when the CPU has it, 8 at a time (SWAR) with ``LM_NO_AVX2=1``:
both must give the same line ends, statuses and decoded texts, byte for byte, on random and
adversarial lines (string lengths 0..300, every alignment, each kind of byte that ends a run
at each position), and never read past the buffer (lines that end at a page boundary followed
by an unmapped page).  Each level runs in a child process (the switch is read once); the
decoded texts are also checked against ``json.loads`` (computed independently here)."""
import json
import os
import pickle
import random
import subprocess
import sys

import torch  # noqa: F401  (loads torch's libraries before the extension)

_CHILD = r"""
import ctypes, mmap, pickle, sys
import torch
from luminamoon import _C
cases = pickle.load(open(sys.argv[1], "rb"))
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
PAGE = mmap.PAGESIZE
out = []
for buf, key, edge in cases:
    if edge:  # the buffer's last byte is the last byte before an unmapped (PROT_NONE) page
        n = (len(buf) + PAGE - 1) // PAGE * PAGE
        m = mmap.mmap(-1, n + PAGE)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        assert libc.mprotect(addr + n, PAGE, 0) == 0
        m[n - len(buf):n] = buf
        view = memoryview(m)[n - len(buf):n]
        r = _C.jsonl_scan(view, key, -1)
        view.release()
        res = tuple(t.numpy().tobytes() for t in r)
        del r
        assert libc.mprotect(addr + n, PAGE, 3) == 0
    else:
        res = tuple(t.numpy().tobytes() for t in _C.jsonl_scan(buf, key, -1))
    out.append(res)
pickle.dump(out, open(sys.argv[2], "wb"))
"""

# the bytes that end a plain run (or are plain), as they appear inside a JSON string
_PIECES = [b"a", b"Z", b" ", b"~", b"\\n", b"\\\"", b"\\\\", b"\\/", b"\\u00e9", b"\\ud83d\\ude00", b"\xc3\xa9",
           b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b"\x7f", b"\x1f", b"\xff", b"\\ud800", b"\\x", b"\t", b"\"x"]


def _string(rng, n):
    """JSON string contents of about n bytes: mostly plain ASCII, with run-ending pieces."""
    out = bytearray()
    while len(out) < n:
        if rng.random() < 0.8:
            out += bytes(rng.randrange(0x20, 0x7F) for _ in range(rng.randint(1, 70))).replace(b"\\", b"/").replace(
                b'"', b"'")
        else:
            out += rng.choice(_PIECES)
    return bytes(out[:n]) if rng.random() < 0.5 else bytes(out)


def _cases():
    rng = random.Random(1234)
    cases = []
    # one run-ending byte at every position 0..300 of a plain string, at every alignment 0..40
    for kind in (b'"', b"\\n", b"\x01", b"\xc3\xa9", b"\xff"):
        for pos in list(range(0, 70)) + list(range(70, 301, 7)):
            pad = b" " * (pos % 41)
            body = b"x" * pos + kind + b"y" * rng.randint(0, 40)
            if kind == b'"':
                line = b'{' + pad + b'"text": "' + b"x" * pos + b'", "z": "' + b"y" * (pos % 37) + b'"}'
            else:
                line = b'{' + pad + b'"id": "' + body + b'", "text": "' + body + b'"}'
            cases.append((line + b"\n", "text", False))
    # random lines, string lengths 0..300, many in one buffer, and at a page boundary
    for i in range(300):
        lines = []
        for _ in range(rng.randint(1, 12)):
            t = _string(rng, rng.randint(0, 300))
            other = _string(rng, rng.randint(0, 80))
            lines.append(b"{" + b" " * rng.randint(0, 33) + b'"meta": "' + other + b'", "text": "' + t + b'"}')
        buf = b"\n".join(lines) + (b"\n" if rng.random() < 0.5 else b"")
        cases.append((buf, "text", i % 3 == 0))
    # the string's closing quote (or its last bytes) as the buffer's very last bytes
    for n in range(0, 80):
        cases.append((b'{"text": "' + b"q" * n + b'"}', "text", True))
        cases.append((b'{"text": "' + b"q" * n, "text", True))
        cases.append((b'{"text": "' + b"q" * n + b"\\", "text", True))
    return cases


def _run(cases, env_extra, tmp_path, tag):
    src, dst = tmp_path / f"cases-{tag}.pkl", tmp_path / f"out-{tag}.pkl"
    with open(src, "wb") as f:
        pickle.dump(cases, f)
    env = {k: v for k, v in os.environ.items() if k not in ("LM_NO_AVX2", "LM_NO_AVX512")}
    env.update(env_extra)
    subprocess.run([sys.executable, "-c", _CHILD, str(src), str(dst)], env=env, check=True, timeout=600)
    with open(dst, "rb") as f:
        return pickle.load(f)


def test_avx2_and_swar_runs_give_the_same_scan(tmp_path):
    cases = _cases()
    fast = _run(cases, {}, tmp_path, "default")
    slow = _run(cases, {"LM_NO_AVX2": "1"}, tmp_path, "swar")
    assert len(fast) == len(slow) == len(cases)
    n_ok = 0
    for (buf, key, _), a, b in zip(cases, fast, slow):
        assert a == b, f"AVX2 and SWAR scans differ on {buf[:120]!r}"
        ends = memoryview(a[0]).cast("q").tolist()
        status = list(a[1])
        offs = memoryview(a[2]).cast("q").tolist()
        data = a[3]
        k = 0
        start = 0
        for end, st in zip(ends, status):
            line = buf[start:end]
            start = end
            if st != 0:
                continue
            # an OK line is one json.loads takes, and the text is its value's UTF-8 bytes
            want = json.loads(line)[key].encode("utf-8")
            assert data[offs[k]:offs[k + 1]] == want, f"decoded text differs on {line[:120]!r}"
            k += 1
            n_ok += 1
        assert k == len(offs) - 1
    assert n_ok > 500  # the cases exercise the decoding path, not only the SLOW fallback
