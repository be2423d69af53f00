#include "luminamoon/status.h"

const char *lm_status_str(lm_status s) {
  switch (s) {
    case LM_OK: return "success";
    case LM_EINVAL: return "invalid argument";
    case LM_ENOMEM: return "out of memory";
    case LM_EOVERFLOW: return "size or offset overflows its type";
    case LM_EUTF8: return "invalid UTF-8";
    case LM_ERANGE: return "index out of range";
    case LM_EIO: return "I/O error";
    case LM_ECORRUPT: return "corrupt data (checksum or structure mismatch)";
    case LM_EVERSION: return "unsupported format version";
    case LM_ESTATE: return "object is in the wrong state for this call";
    case LM_ENOTFOUND: return "not found";
    case LM_ETOOBIG: return "input exceeds a configured limit";
    default: return "unknown status";
  }
}

const char *lm_status_name(lm_status s) {
  switch (s) {
    case LM_OK: return "LM_OK";
    case LM_EINVAL: return "LM_EINVAL";
    case LM_ENOMEM: return "LM_ENOMEM";
    case LM_EOVERFLOW: return "LM_EOVERFLOW";
    case LM_EUTF8: return "LM_EUTF8";
    case LM_ERANGE: return "LM_ERANGE";
    case LM_EIO: return "LM_EIO";
    case LM_ECORRUPT: return "LM_ECORRUPT";
    case LM_EVERSION: return "LM_EVERSION";
    case LM_ESTATE: return "LM_ESTATE";
    case LM_ENOTFOUND: return "LM_ENOTFOUND";
    case LM_ETOOBIG: return "LM_ETOOBIG";
    default: return "LM_UNKNOWN";
  }
}
