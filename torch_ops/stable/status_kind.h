// Which Python exception a core status becomes: the one mapping of both extensions
// (luminamoon._C: torch_ops/common.h, luminamoon._ops: torch_ops/stable/stable_common.h).
// Header-only, no torch and no pybind11.
#pragma once

extern "C" {
#include "luminamoon/status.h"
}

namespace luminamoon {

enum class StatusKind { Value, Index, Memory, Runtime };

inline StatusKind status_kind(lm_status s) {
  switch (s) {
    case LM_EINVAL:
    case LM_EUTF8:
    case LM_ECORRUPT:
    case LM_EOVERFLOW:
    case LM_ETOOBIG:
      return StatusKind::Value;  // ValueError
    case LM_ERANGE:
      return StatusKind::Index;  // IndexError
    case LM_ENOMEM:
      return StatusKind::Memory;
    default:
      return StatusKind::Runtime;  // RuntimeError
  }
}

}  // namespace luminamoon
