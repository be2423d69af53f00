/* luminamoon/state.h — the StateTracker: a crash-safe, two-slot checkpoint of a
 * pipeline's coordinate, written by ResumablePipeline after the output it covers is
 * durable (python/luminamoon/data/resumable.py, "The commit protocol").
 *
 * FILE: exactly 128 bytes.  Slot A = bytes 0..63, slot B = bytes 64..127.
 * A commit writes the slot that does NOT hold the newest valid state (pwrite of
 * 64 bytes at its offset, then fdatasync); the other slot is never touched, so a
 * torn or interrupted write always leaves the previous commit intact.  Loading
 * picks the valid slot with the higher sequence number.
 *
 * SLOT LAYOUT (64 bytes, all integers little-endian, no padding):
 *
 *   offset size type  field
 *   ------ ---- ----  ----------------------------------------------------------
 *        0    2  u16  magic        LM_STATE_MAGIC = 0x534C (bytes 'L' 'S')
 *        2    2  u16  version      LM_STATE_VERSION = 1
 *        4    4  u32  epoch
 *        8    8  u64  sequence     1 for the first commit, +1 per commit
 *       16    8  u64  batch_index
 *       24    8  u64  sample_index
 *       32    8  u64  source_pos   opaque to the core (e.g. a byte offset)
 *       40    8  u64  source_pos2  opaque to the core (e.g. a row within a group)
 *       48    8  u64  wal_lsn      the dedup WAL's LSN at this coordinate
 *       56    4  u32  shard        shard (file) index of the source
 *       60    4  u32  crc          CRC32C (luminamoon/crc32c.h) of bytes 0..59
 *
 * SLOT CLASSIFICATION (lm_state_slot_decode), checked in this order:
 *   1. all 64 bytes zero                    -> EMPTY   (LM_ENOTFOUND): never written
 *   2. magic != LM_STATE_MAGIC              -> CORRUPT (LM_ECORRUPT)
 *   3. crc mismatch                         -> CORRUPT (LM_ECORRUPT)
 *   4. version != LM_STATE_VERSION          -> VERSION (LM_EVERSION)
 *   5. sequence == 0                        -> CORRUPT (LM_ECORRUPT)
 *   6. otherwise                            -> VALID   (LM_OK)
 * FROZEN ACROSS ALL VERSIONS: the slot is 64 bytes, bytes 0..1 are the magic,
 * 2..3 the version and 60..63 the CRC32C of bytes 0..59.  So a damaged version
 * field reads as CORRUPT (and falls back to the other slot), while a well-formed
 * slot of another version reads as VERSION.
 *
 * LOAD RESULT (lm_state_load) from the two slots:
 *   - a slot is VERSION                     -> LM_EVERSION (a file written by another
 *     format version is never silently rolled back to an older slot)
 *   - at least one slot VALID               -> LM_OK, the VALID slot with the higher
 *     sequence (the other one may be EMPTY or CORRUPT: torn write, bit rot)
 *   - both EMPTY                            -> LM_ENOTFOUND: nothing was ever committed;
 *     starting from the beginning is correct
 *   - otherwise (no VALID slot, at least one CORRUPT) -> LM_ECORRUPT: a commit was
 *     made or attempted and no valid copy survives.  Never treated as "start from
 *     zero"; the caller must decide (lm_state_reset makes a fresh start explicit).
 *     Note: a first-ever commit torn by a power loss also lands here (A CORRUPT,
 *     B EMPTY), because that picture cannot be told apart from a single committed
 *     slot that later rotted; refusing is the safe answer.
 *
 * DURABILITY: the file is created with 128 zero bytes through a temporary file
 * (path + ".tmp"), fsync, rename, fsync of the directory, so a file at `path`
 * always has exactly 128 bytes; any other size is reported as LM_ECORRUPT.
 * lm_state_commit returns only after fdatasync succeeded.  A kill -9 at any
 * instant leaves either the old or the new coordinate, never neither.
 *
 * SEQUENCE: u64, incremented by one per commit; it cannot wrap in practice
 * (2^64 commits).  A commit when the newest sequence is UINT64_MAX returns
 * LM_EOVERFLOW rather than wrapping.
 *
 * Thread-safety: the encode/decode functions are pure and thread-safe.  An
 * lm_state handle is not: serialise calls on one handle.  One writer per file:
 * two processes committing to the same file are not detected and not supported.
 */
#ifndef LUMINAMOON_STATE_H
#define LUMINAMOON_STATE_H

#include <stdint.h>

#include "luminamoon/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LM_STATE_MAGIC 0x534Cu
#define LM_STATE_VERSION 1u
#define LM_STATE_SLOT_SIZE 64u
#define LM_STATE_FILE_SIZE 128u

/* The coordinate a commit persists.  All fields are opaque to the core except
 * as documented; widths match the slot layout exactly (no range checks needed). */
typedef struct lm_state_coord {
  uint32_t epoch;
  uint32_t shard;        /* shard (file) index of the source */
  uint64_t batch_index;  /* batches delivered to the consumer in this epoch */
  uint64_t sample_index; /* samples (documents) delivered in this epoch */
  uint64_t source_pos;   /* source position, word 1 (opaque) */
  uint64_t source_pos2;  /* source position, word 2 (opaque) */
  uint64_t wal_lsn;      /* dedup WAL LSN synced before this coordinate */
} lm_state_coord;

/* ---- pure slot codec ---------------------------------------------------- */

/* Encodes a VALID slot (magic, LM_STATE_VERSION, sequence, coord, crc) into
 * out[0..63].  LM_EINVAL if coord or out is NULL or sequence == 0 (0 is reserved
 * so that an all-zero slot always means "never written").
 * Ownership: writes exactly 64 bytes into caller memory. */
lm_status lm_state_slot_encode(uint64_t sequence, const lm_state_coord *coord,
                               unsigned char out[LM_STATE_SLOT_SIZE]);

/* Classifies and decodes in[0..63] (see SLOT CLASSIFICATION): LM_OK (VALID,
 * *sequence and *coord filled), LM_ENOTFOUND (EMPTY), LM_ECORRUPT, LM_EVERSION;
 * LM_EINVAL if in is NULL.  sequence and coord may be NULL (classify only); they
 * are written only on LM_OK. */
lm_status lm_state_slot_decode(const unsigned char in[LM_STATE_SLOT_SIZE], uint64_t *sequence,
                               lm_state_coord *coord);

/* ---- the tracker ---------------------------------------------------------- */

typedef struct lm_state lm_state;

/* Opens the state file at `path`, creating it durably (128 zero bytes) if it does
 * not exist.  On LM_OK *out owns an open file descriptor; release it with
 * lm_state_close.  Errors: LM_EINVAL (NULL argument, empty path), LM_EIO (open,
 * create, read or sync failed, e.g. the directory is missing or unwritable;
 * errno is preserved), LM_ECORRUPT (the file exists but is not exactly 128 bytes),
 * LM_ENOMEM.  Opening never fails because a slot is corrupt: lm_state_load says. */
lm_status lm_state_open(const char *path, lm_state **out);

/* Closes the file and frees st.  NULL is accepted (no-op).  Cannot fail. */
void lm_state_close(lm_state *st);

/* Re-reads both slots from disk and returns the newest valid coordinate (see
 * LOAD RESULT): LM_OK, LM_ENOTFOUND (never committed), LM_ECORRUPT (no valid
 * slot survives), LM_EVERSION, LM_EIO, LM_EINVAL (NULL).  *coord is written only
 * on LM_OK; *sequence (may be NULL) receives the loaded slot's sequence on LM_OK. */
lm_status lm_state_load(lm_state *st, lm_state_coord *coord, uint64_t *sequence);

/* Makes `coord` durable: encodes it with sequence = newest valid sequence + 1
 * (1 if none), pwrites it over the slot that does not hold the newest valid
 * state, and fdatasyncs.  Returns LM_OK only once the data is on stable storage.
 * Refuses (nothing written) with LM_ECORRUPT when no valid slot survives but a
 * commit had happened (see LOAD RESULT; call lm_state_reset to start over) and
 * with LM_EVERSION when a slot holds another format version.  LM_EIO when the
 * write or sync failed: the previous committed state is still intact and the
 * next commit targets the same slot again.  LM_EOVERFLOW at sequence UINT64_MAX. */
lm_status lm_state_commit(lm_state *st, const lm_state_coord *coord);

/* Explicit fresh start: zeroes both slots and syncs.  Afterwards lm_state_load
 * returns LM_ENOTFOUND.  LM_EIO, LM_EINVAL. */
lm_status lm_state_reset(lm_state *st);

/* Diagnostics: the classification of each slot (as lm_state_slot_decode returns
 * it) and its sequence (0 unless VALID), as last known to this handle (read by
 * open or load, written by commit or reset).  LM_EIO marks a slot whose write by
 * this handle failed (content unknown).  slot_status / slot_sequence are arrays
 * of 2 (A, B).  LM_EINVAL on NULL arguments. */
lm_status lm_state_inspect(const lm_state *st, lm_status slot_status[2], uint64_t slot_sequence[2]);

#ifdef __cplusplus
}
#endif
#endif
