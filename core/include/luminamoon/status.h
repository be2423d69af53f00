/* luminamoon/status.h — status codes returned by every public core function.
 *
 * Every public function of the core returns an lm_status (or documents why it
 * cannot fail).  No core function aborts, exits or prints on bad input.
 * Thread-safety: everything here is pure and thread-safe.
 */
#ifndef LUMINAMOON_STATUS_H
#define LUMINAMOON_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lm_status {
  LM_OK = 0,
  LM_EINVAL = 1,      /* an argument is NULL, out of its domain or inconsistent */
  LM_ENOMEM = 2,      /* an allocation failed */
  LM_EOVERFLOW = 3,   /* a size or offset does not fit the requested width */
  LM_EUTF8 = 4,       /* invalid UTF-8 where valid UTF-8 is required */
  LM_ERANGE = 5,      /* an index is out of range */
  LM_EIO = 6,         /* an operating-system I/O call failed (errno is preserved) */
  LM_ECORRUPT = 7,    /* persisted data failed its checksum or structure check */
  LM_EVERSION = 8,    /* persisted data has an unknown format version */
  LM_ESTATE = 9,      /* the object is in the wrong state for this call (closed, ...) */
  LM_ENOTFOUND = 10,  /* nothing valid was found (e.g. no valid state slot) */
  LM_ETOOBIG = 11,    /* an input exceeds a configured limit */
  LM_STATUS_COUNT_ = 12
} lm_status;

/* A static, NUL-terminated English description of `s`; never NULL.
 * Ownership: the returned string is static; do not free. */
const char *lm_status_str(lm_status s);

/* The symbolic name of `s` ("LM_EINVAL", ...); never NULL, static. */
const char *lm_status_name(lm_status s);

#ifdef __cplusplus
}
#endif
#endif
