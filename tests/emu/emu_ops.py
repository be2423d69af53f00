"""torch.ops.luminamoon.* with the CUDA kernels run under the host emulation (see build.py).

The orchestration mirrors torch_ops/ops_cuda.cu: validate the offsets, size and pass the
workspace, read back the output size between the passes of gather/compact.  Tensors are CPU
tensors: "device pointers" are host pointers of the emulation's library.
"""
import ctypes

import torch


class EmuError(RuntimeError):
    pass


class Strs(ctypes.Structure):
    _fields_ = [("offsets", ctypes.c_void_p), ("offset_bytes", ctypes.c_int), ("n", ctypes.c_size_t),
                ("data", ctypes.c_void_p), ("data_len", ctypes.c_size_t)]


P = ctypes.c_void_p
SZ = ctypes.c_size_t
ERR = ctypes.c_int
SIGS = {
    "lm_cuda_validate_offsets": (ERR, [Strs, P, P]),
    "lm_cuda_match": (ERR, [Strs, P, P, SZ, ctypes.c_int, P, P]),
    "lm_cuda_prefix_match": (ERR, [Strs, P, P, SZ, P, P]),
    "lm_cuda_equal_scalar": (ERR, [Strs, P, P, SZ, P, P]),
    "lm_cuda_equal_workspace_size": (SZ, [SZ]),
    "lm_cuda_equal": (ERR, [Strs, Strs, P, SZ, P, P]),
    "lm_cuda_hash64_workspace_size": (SZ, [Strs]),
    "lm_cuda_hash64": (ERR, [Strs, ctypes.c_uint64, P, SZ, P, P]),
    "lm_cuda_pad_bytes": (ERR, [Strs, SZ, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, P, P, P]),
    "lm_cuda_gather_offsets_workspace_size": (SZ, [SZ]),
    "lm_cuda_gather_offsets": (ERR, [Strs, P, SZ, P, P, P, SZ, P]),
    "lm_cuda_compact_select_workspace_size": (SZ, [SZ]),
    "lm_cuda_compact_select": (ERR, [Strs, P, P, P, P, P, SZ, P]),
    "lm_cuda_compact_offsets": (ERR, [P, P, SZ, P, P]),
    "lm_cuda_copy_strings": (ERR, [Strs, P, SZ, P, ctypes.c_uint64, P, P]),
    "lm_cuda_gather_data": (ERR, [Strs, P, SZ, P, ctypes.c_uint64, P, P]),
    "lm_cuda_compact_data": (ERR, [Strs, P, SZ, P, ctypes.c_uint64, P, P]),
    "lm_cuda_minhash_validate": (ERR, [P, SZ, SZ, P, P]),
    "lm_cuda_minhash": (ERR, [P, SZ, P, SZ, P, P, SZ, ctypes.c_int, P, P]),
    "lm_emu_last_error": (ctypes.c_char_p, []),
    "lm_emu_reset": (None, []),
}


def ptr(t):
    return ctypes.c_void_p(t.data_ptr() if t is not None and t.numel() else None)


class EmuOps:
    def __init__(self, lib_path):
        self.lib = ctypes.CDLL(str(lib_path))
        for name, (res, args) in SIGS.items():
            f = getattr(self.lib, name)
            f.restype, f.argtypes = res, args

    def _check(self, err, what):
        if err != 0:
            msg = self.lib.lm_emu_last_error().decode()
            self.lib.lm_emu_reset()
            raise EmuError(f"{what}: error {err}: {msg or 'invalid argument'}")

    def _strs(self, offsets, data, what="offsets"):
        assert offsets.dtype in (torch.int32, torch.int64) and offsets.is_contiguous() and data.is_contiguous()
        s = Strs(offsets.data_ptr(), offsets.element_size(), offsets.numel() - 1,
                 data.data_ptr() if data.numel() else None, data.numel())
        flag = torch.zeros(1, dtype=torch.int32)
        self._check(self.lib.lm_cuda_validate_offsets(s, ptr(flag), None), "validate_offsets")
        if int(flag):
            raise ValueError(f"{what}: invalid offsets (flags {int(flag)})")
        return s

    def _match(self, offsets, data, pattern, exact):
        s = self._strs(offsets, data)
        out = torch.empty(s.n, dtype=torch.bool)
        if s.n == 0:
            return out
        pat = pattern.encode("utf-8")
        host = ctypes.create_string_buffer(pat, len(pat) or 1)
        dev = torch.frombuffer(bytearray(pat), dtype=torch.uint8) if len(pat) > 512 else None
        # the entry points torch_ops/ops_cuda.cu calls (both run lm_cuda_match)
        fn = self.lib.lm_cuda_equal_scalar if exact else self.lib.lm_cuda_prefix_match
        self._check(fn(s, host, ptr(dev), len(pat), ptr(out), None), "equal_scalar" if exact else "prefix_match")
        return out

    def prefix_match(self, offsets, data, prefix):
        return self._match(offsets, data, prefix, 0)

    def equal_scalar(self, offsets, data, s):
        return self._match(offsets, data, s, 1)

    def equal(self, oa, da, ob, db):
        a, b = self._strs(oa, da, "offsets_a"), self._strs(ob, db, "offsets_b")
        out = torch.empty(a.n, dtype=torch.bool)
        if a.n == 0:
            return out
        ws = torch.empty(max(1, self.lib.lm_cuda_equal_workspace_size(a.n)), dtype=torch.uint8)
        self._check(self.lib.lm_cuda_equal(a, b, ptr(ws), ws.numel(), ptr(out), None), "equal")
        return out

    def hash64(self, offsets, data, seed):
        s = self._strs(offsets, data)
        out = torch.empty(s.n, dtype=torch.int64)
        if s.n == 0:
            return out
        ws = torch.empty(max(1, self.lib.lm_cuda_hash64_workspace_size(s)), dtype=torch.uint8)
        self._check(self.lib.lm_cuda_hash64(s, seed & (2**64 - 1), ptr(ws), ws.numel(), ptr(out), None), "hash64")
        return out

    def pad_bytes(self, offsets, data, max_len, pad_id=0, bos_id=-1, eos_id=-1):
        s = self._strs(offsets, data)
        tokens = torch.empty(s.n, max_len, dtype=torch.int64)
        lengths = torch.empty(s.n, dtype=torch.int64)
        if s.n == 0:
            return tokens, lengths
        self._check(self.lib.lm_cuda_pad_bytes(s, max_len, pad_id, bos_id, eos_id, ptr(tokens), ptr(lengths), None),
                    "pad_bytes")
        return tokens, lengths

    def _like(self, offsets, out64):
        return out64 if offsets.dtype == torch.int64 else out64.to(torch.int32)

    def gather(self, offsets, data, index):
        s = self._strs(offsets, data)
        index = index.contiguous()
        m = index.numel()
        out64 = torch.empty(m + 1, dtype=torch.int64)
        bad = torch.empty(1, dtype=torch.int32)
        ws = torch.empty(max(1, self.lib.lm_cuda_gather_offsets_workspace_size(m)), dtype=torch.uint8)
        self._check(self.lib.lm_cuda_gather_offsets(s, ptr(index), m, ptr(out64), ptr(bad), ptr(ws), ws.numel(), None),
                    "gather_offsets")
        if int(bad):
            raise IndexError("gather: index out of range")
        total = int(out64[m])
        out = torch.empty(total, dtype=torch.uint8)
        self._check(self.lib.lm_cuda_gather_data(s, ptr(index), m, ptr(out64), total, ptr(out), None), "gather_data")
        return self._like(offsets, out64), out

    def compact(self, offsets, data, mask):
        s = self._strs(offsets, data)
        if s.n == 0:
            return torch.zeros(1, dtype=offsets.dtype), torch.empty(0, dtype=torch.uint8)
        mask = mask.contiguous()
        index = torch.empty(s.n, dtype=torch.int64)
        count = torch.empty(1, dtype=torch.int64)
        incl = torch.empty(s.n, dtype=torch.int64)
        ws = torch.empty(max(1, self.lib.lm_cuda_compact_select_workspace_size(s.n)), dtype=torch.uint8)
        self._check(self.lib.lm_cuda_compact_select(s, ptr(mask), ptr(index), ptr(count), ptr(incl), ptr(ws),
                                                    ws.numel(), None), "compact_select")
        m, total = int(count), int(incl[s.n - 1])
        out64 = torch.empty(m + 1, dtype=torch.int64)
        self._check(self.lib.lm_cuda_compact_offsets(ptr(incl), ptr(index), m, ptr(out64), None), "compact_offsets")
        out = torch.empty(total, dtype=torch.uint8)
        self._check(self.lib.lm_cuda_compact_data(s, ptr(index), m, ptr(out64), total, ptr(out), None), "compact_data")
        return self._like(offsets, out64), out

    def minhash(self, shingle_hashes, doc_offsets, a, b, precision=64):
        """torch.ops.luminamoon.minhash as torch_ops/minhash_cuda.cu runs it (validate, then the kernel)."""
        h, off = shingle_hashes.contiguous(), doc_offsets.contiguous()
        a, b = a.contiguous(), b.contiguous()
        n, H, m = off.numel() - 1, a.numel(), h.numel()
        flag = torch.zeros(1, dtype=torch.int32)
        self._check(self.lib.lm_cuda_minhash_validate(ptr(off), n, m, ptr(flag), None), "minhash_validate")
        if int(flag):
            raise ValueError(f"doc_offsets: invalid offsets (flags {int(flag)})")
        out = torch.empty(n, H, dtype=torch.int64)
        if n == 0 or H == 0:
            return out
        self._check(self.lib.lm_cuda_minhash(ptr(h), m, ptr(off), n, ptr(a), ptr(b), H, precision, ptr(out), None),
                    "minhash")
        return out

    def minhash_unvalidated(self, shingle_hashes, doc_offsets, a, b, precision=64):
        """The kernel alone on possibly invalid offsets (memory safety: it must clamp, never fault)."""
        n, H = doc_offsets.numel() - 1, a.numel()
        out = torch.empty(n, H, dtype=torch.int64)
        self._check(self.lib.lm_cuda_minhash(ptr(shingle_hashes), shingle_hashes.numel(), ptr(doc_offsets), n,
                                             ptr(a), ptr(b), H, precision, ptr(out), None), "minhash")
        return out
