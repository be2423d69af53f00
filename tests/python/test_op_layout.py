"""One hop per operator (issue 18, acceptance 4).

For every operator registered under ``torch.ops.luminamoon`` (listed from the dispatcher at run
time, not from a list kept here), searching its name in torch_ops/, csrc/, core/ and
python/luminamoon/ops.py finds its schema, its CPU kernel, its CUDA kernel and its fake kernel,
each under that one name:

  schema   torch_ops/schema.cpp        m.def("NAME(...")           (and nowhere else)
  CPU      torch_ops/*.cpp             m.impl("NAME", &NAME_cpu) in a TORCH_LIBRARY_IMPL(luminamoon, CPU) block
                                       (STABLE_TORCH_LIBRARY_IMPL: m.impl("NAME", TORCH_BOX(&NAME_cpu))),
                                       and the function NAME_cpu defined in the same file
  CUDA     torch_ops/*.cu              m.impl("NAME", &NAME_cuda) in a TORCH_LIBRARY_IMPL(luminamoon, CUDA) block,
                                       NAME_cuda defined there, calling a csrc/ entry point lm_cuda_NAME...
                                       declared in csrc/luminamoon_cuda.h and defined in csrc/*.cu;
                                       or the operator is listed as "cpu-only:" in schema.cpp (then it
                                       must have no CUDA registration at all)
  fake     python/luminamoon/ops.py    @torch.library.register_fake("luminamoon::NAME")

The run-time half checks that the dispatcher agrees: a CPU kernel and a Meta (fake) kernel for
every operator.  CUDA registrations are checked from the sources only (this build has no CUDA).
"""
from __future__ import annotations

import pathlib
import re

import pytest
import torch

import luminamoon  # noqa: F401  (registers the operators and their fake kernels)

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _ops() -> list[str]:
    names = sorted(n.split("::", 1)[1] for n in torch._C._dispatch_get_all_op_names()
                   if n.startswith("luminamoon::"))
    assert len(names) >= 16, names  # 15 string ops + minhash at the time of writing
    return names


def _read(pattern: str) -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in sorted(ROOT.glob(pattern))}


def _blocks(text: str, key: str) -> str:
    """The bodies of every TORCH_LIBRARY_IMPL(luminamoon, KEY, m) { ... } block in text."""
    out = []
    for m in re.finditer(r"TORCH_LIBRARY_IMPL\(luminamoon,\s*" + key + r",\s*m\)\s*\{", text):
        depth, i = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        out.append(text[m.end():i - 1])
    return "\n".join(out)


CPP = _read("torch_ops/*.cpp")
CU = _read("torch_ops/*.cu")
CSRC_CU = _read("csrc/*.cu")
CUDA_H = (ROOT / "csrc" / "luminamoon_cuda.h").read_text()
SCHEMA = (ROOT / "torch_ops" / "schema.cpp").read_text()
OPS_PY = (ROOT / "python" / "luminamoon" / "ops.py").read_text()
CPU_ONLY = set(" ".join(re.findall(r"cpu-only:([^\n]*)", SCHEMA)).split())
OPS = _ops()


def test_every_op_is_checked():
    # the list comes from the dispatcher; schema.cpp defines exactly these operators
    defined = sorted(re.findall(r'm\.def\("(\w+)\(', SCHEMA))
    assert defined == OPS
    assert CPU_ONLY <= set(OPS), CPU_ONLY - set(OPS)


def test_schemas_live_in_schema_cpp_only():
    for path, text in {**CPP, **CU}.items():
        if path == "torch_ops/schema.cpp":
            continue
        assert "TORCH_LIBRARY(" not in text and "TORCH_LIBRARY_FRAGMENT(" not in text, path
        assert not re.search(r'm\.def\("\w+\(', text), f"{path} defines an operator schema"


@pytest.mark.parametrize("name", OPS)
def test_op_is_findable_by_its_name(name):
    # schema
    assert len(re.findall(r'm\.def\("' + name + r"\(", SCHEMA)) == 1
    # CPU kernel: registered in a CPU block, defined in the same file
    cpu = [p for p, t in CPP.items() if re.search(r'm\.impl\("' + name + r'",\s*(?:TORCH_BOX\()?&(?:luminamoon::)?' + name
                                                   + r"_cpu\)", _blocks(t, "CPU"))]
    assert len(cpu) == 1, f"{name}: CPU registration m.impl(\"{name}\", &{name}_cpu) found in {cpu}"
    assert re.search(r"\b" + name + r"_cpu\([^;]*\)\s*\{", CPP[cpu[0]]), f"{name}_cpu is not defined in {cpu[0]}"
    # CUDA kernel
    cuda = [p for p, t in CU.items() if re.search(r'm\.impl\("' + name + r'"', _blocks(t, "CUDA"))]
    if name in CPU_ONLY:
        assert cuda == [], f"{name} is listed cpu-only in schema.cpp but has a CUDA kernel in {cuda}"
    else:
        assert len(cuda) == 1, f"{name}: CUDA registration found in {cuda}"
        text = CU[cuda[0]]
        assert re.search(r'm\.impl\("' + name + r'",\s*(?:TORCH_BOX\()?&(?:luminamoon::)?' + name + r"_cuda\)",
                         _blocks(text, "CUDA")), f"{name}: registered under another function than {name}_cuda"
        m = re.search(r"\b" + name + r"_cuda\([^;]*?\)\s*\{", text)
        assert m, f"{name}_cuda is not defined in {cuda[0]}"
        if name != "attention_mask":  # ATen ops on the current stream: no csrc kernel of its own
            entry = "lm_cuda_" + name
            body = text[m.start():text.index("\n}\n", m.start())]
            assert re.search(r"\b" + entry + r"\w*\b", body), f"{name}_cuda calls no {entry}*"
            assert re.search(r"^cudaError_t " + entry + r"\w*\(", CUDA_H, re.M), f"{entry}* not in luminamoon_cuda.h"
            assert any(re.search(r'extern "C" cudaError_t ' + entry + r"\w*\(", t) for t in CSRC_CU.values())
    # fake kernel
    assert len(re.findall(r'register_fake\("luminamoon::' + name + r'"\)', OPS_PY)) == 1


@pytest.mark.parametrize("name", OPS)
def test_dispatcher_has_cpu_and_fake_kernels(name):
    qual = f"luminamoon::{name}"
    assert torch._C._dispatch_has_kernel_for_dispatch_key(qual, "CPU")
    assert torch._C._dispatch_has_kernel_for_dispatch_key(qual, "Meta")


def test_offset_op_prototypes_are_written_out():
    # every lm_o32_* / lm_o64_* function the core defines is declared by name (no macro to expand)
    header = (ROOT / "core" / "include" / "luminamoon" / "string_tensor.h").read_text()
    assert "LM_DECLARE_OFFSET_OPS" not in header
    impl = (ROOT / "core" / "src" / "ops_offsets_impl.h").read_text()
    defined = set(re.findall(r"^lm_status FN\((\w+)\)\(", impl, re.M))
    assert defined, "no FN(...) definitions found in ops_offsets_impl.h"
    for suf in ("o32", "o64"):
        for fn in defined:
            assert re.search(r"\blm_" + suf + "_" + fn + r"\(", header), f"lm_{suf}_{fn} not declared"
