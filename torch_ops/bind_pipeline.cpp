// Binding of the FusedPipeline (core pipeline.h).  It borrows the C objects of
// the stage bindings it was built from and keeps them alive; the deduplicator
// is shared with its Python owner (locked while a batch runs).
#include "bind_near_dedup.h"
#include "bind_stages.h"

extern "C" {
#include "luminamoon/pipeline.h"
}

#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <thread>
#include <vector>

namespace luminamoon {

py::dict fused_pii_counters(const lm_pii_counts &c);          // stages.cpp
py::dict fused_clean_counters(const lm_clean_counters &c);    // stages.cpp
py::dict fused_quality_counters(const lm_quality_counters &c);  // stages.cpp

namespace {

struct Fused {
  std::shared_ptr<Cleaner> cleaner;
  std::shared_ptr<Quality> quality;
  std::shared_ptr<Dedup> dedup;
  std::shared_ptr<Pii> pii;
  std::shared_ptr<NearDedup> near;  // near duplicates (bind_near_dedup.h), shared like dedup
  lm_fused *obj = nullptr;
  std::mutex mu;
  Fused(std::shared_ptr<Cleaner> c, std::shared_ptr<Quality> q, std::shared_ptr<Dedup> d, std::shared_ptr<Pii> p,
        std::shared_ptr<NearDedup> nd)
      : cleaner(std::move(c)), quality(std::move(q)), dedup(std::move(d)), pii(std::move(p)), near(std::move(nd)) {
    lm_fused_stages st;
    st.cleaner = cleaner ? cleaner->obj : nullptr;
    st.quality = quality ? quality->obj : nullptr;
    st.dedup = dedup ? dedup->obj : nullptr;
    st.pii = pii ? pii->obj : nullptr;
    st.near = near ? near->obj : nullptr;
    lm_status s = lm_fused_create(&st, &obj);
    if (s) raise_status(s, "FusedPipeline");
  }
  ~Fused() { lm_fused_destroy(obj); }
};

py::dict counters_dict(const lm_fused_counters &c, bool has[5]) {
  py::dict d;
  d["batches"] = c.batches;
  d["docs_in"] = c.docs_in;
  d["docs_out"] = c.docs_out;
  d["bytes_in"] = c.bytes_in;
  d["bytes_out"] = c.bytes_out;
  d["dropped_clean"] = c.dropped_clean;
  d["dropped_quality"] = c.dropped_quality;
  d["dropped_duplicate"] = c.dropped_duplicate;
  d["dropped_pii"] = c.dropped_pii;
  if (has[0]) d["clean"] = fused_clean_counters(c.clean);
  if (has[1]) d["quality"] = fused_quality_counters(c.quality);
  if (has[2]) {
    py::dict dd;
    dd["probes"] = c.dedup_probes;
    dd["inserts"] = c.dedup_inserts;
    dd["duplicates"] = c.dropped_duplicate;
    d["dedup"] = dd;
  }
  if (has[3]) d["pii"] = fused_pii_counters(c.pii);
  if (has[4]) d["dropped_near_duplicate"] = c.dropped_near_duplicate;
  return d;
}


// What one locked batch run ended with (the exception is raised later, with the GIL held).
struct RunOutcome {
  lm_status s = LM_OK;
  int err = 0;
  bool closed = false;
  bool foreign = false;  // a deduplicator's log belongs to the process this one was forked from
};

// After a run (the same locks held): what the batch's consumer records with it.
struct RunSnapshot {
  uint64_t lsn = 0, near_lsn = 0;
  uint64_t cycle[LM_PII_TYPE_COUNT] = {};
  lm_fused_counters counters;
};

// One batch through the pipeline with its locks held (the pipeline's, the deduplicators'); snap,
// when given, is filled under the same locks (so it is the state right after this batch, whatever
// runs next).  No GIL needed: called with it released, or from a thread of no interpreter.
RunOutcome run_locked(Fused &f, const lm_docs &docs, lm_batch_result &r, const lm_exec &ex, RunSnapshot *snap) {
  RunOutcome o;
  if ((f.dedup && foreign_wal(*f.dedup)) || (f.near && foreign_wal(*f.near))) {
    o.foreign = true;
    return o;
  }
  StageCall gate;
  std::lock_guard<std::mutex> lk(f.mu);
  std::unique_lock<std::mutex> dl, nl;
  if (f.dedup) {
    dl = std::unique_lock<std::mutex>(f.dedup->mu);
    o.closed = f.dedup->closed;
  }
  if (f.near) {
    nl = std::unique_lock<std::mutex>(f.near->mu);
    o.closed = o.closed || f.near->closed;
  }
  if (o.closed) return o;
  errno = 0;
  o.s = lm_fused_run(f.obj, &docs, &r, &ex);
  o.err = errno;
  if (snap && o.s == LM_OK) {
    if (f.dedup) lm_dedup_lsn(f.dedup->obj, &snap->lsn);
    if (f.near) lm_dedup_lsn(f.near->index(), &snap->near_lsn);
    lm_fused_get_pii_cycle(f.obj, snap->cycle);
    lm_fused_get_counters(f.obj, &snap->counters);
  }
  return o;
}

// The exception of a failed run (as FusedPipeline.run raises it); nothing when it succeeded.
void raise_outcome(Fused &f, const RunOutcome &o) {
  if (o.foreign) {
    if (f.dedup && foreign_wal(*f.dedup)) raise_foreign_wal("FusedPipeline", "StreamDeduplicator", f.dedup->path, f.dedup->pid);
    raise_foreign_wal("FusedPipeline", "NearDeduplicator", f.near->path, f.near->pid);
  }
  if (o.closed) throw py::value_error("FusedPipeline: its StreamDeduplicator or NearDeduplicator is closed");
  if (o.s != LM_OK && f.near && lm_fused_near_failed(f.obj)) f.near->raise(o.s, "FusedPipeline", o.err);
  if (o.s == LM_ETOOBIG && f.dedup) f.dedup->raise_full("FusedPipeline");
  if (o.s == LM_ESTATE && f.dedup) f.dedup->raise_failed("FusedPipeline");
  if (o.s != LM_OK) raise_status(o.s, "FusedPipeline", f.dedup ? f.dedup->path : "", o.err);
}

// FusedRunner: the batches of one stream run one after another on a thread of their own, which
// never takes the GIL.  submit() queues a batch and returns at once; collect() returns the oldest
// batch's result (waiting for it with the GIL released).  Why: the thread that called run() between
// batches had to take the GIL back after each one, and with a reader and a consumer thread running
// Python beside it, it waited for it (a core idle) -- here the next batch is already queued when one
// ends.  After a failed batch no later batch runs (they are dropped: their results would follow a
// batch that did not happen); collect() raises the failure, then "failed earlier".  close() drops the
// queued batches, waits for the one running and joins the thread.  The inputs (DocsArg: Python
// objects) are created and destroyed with the GIL held, never on the runner's thread.
//
// fork(): os.fork() first waits until no runner runs a batch and starts none until the fork is done
// (pause/resume, registered with os.register_at_fork below), so the batch locks -- the pipeline's and
// the deduplicators' mutexes -- are free in the child, which can use the pipeline and close its
// deduplicators.  The thread itself is not in the child: there a runner is not usable (submit and
// collect raise), and closing or dropping it neither joins the thread nor destroys the condition
// variable the parent's thread waits on (both would wait forever or abort); they are left as they are.
struct FusedRunner {
  struct Job {
    std::unique_ptr<DocsArg> in;
    lm_exec ex;
    lm_batch_result r;
    RunOutcome o;
    RunSnapshot snap;
    Job() { lm_batch_result_init(&r); }
    ~Job() { lm_batch_result_free(&r); }
  };
  std::shared_ptr<Fused> f;
  size_t max_jobs;
  std::mutex m;
  std::unique_ptr<std::condition_variable> cv{new std::condition_variable};  // left alone in a forked child
  std::deque<std::unique_ptr<Job>> todo, done;
  bool running = false, stop = false, failed = false, paused = false;
  std::unique_ptr<std::thread> th;  // started by the first submit(); left alone in a forked child
  pid_t pid = 0;                    // the process th runs in

  FusedRunner(std::shared_ptr<Fused> fused, size_t max_jobs_) : f(std::move(fused)), max_jobs(max_jobs_) {}
  ~FusedRunner() {
    if (forked()) {
      abandon();
      return;
    }
    {
      std::lock_guard<std::mutex> lk(m);
      stop = true;
    }
    cv->notify_all();
    if (th && th->joinable()) {
      py::gil_scoped_release nogil;  // the running batch may take a while
      th->join();
    }
    // todo/done (Python objects inside) die here, with the GIL held
  }

  // This process is a child forked after the thread started: the thread is the parent's.
  bool forked() const { return pid != 0 && pid != getpid(); }

  // In a forked child (GIL held, no other thread of this runner here): the jobs dropped, the thread
  // and the condition variable left as they are (not joined, not destroyed), the mutex not taken
  // (the parent's thread may have held it).
  void abandon() {
    (void)th.release();
    (void)cv.release();
    stop = true;
    todo.clear();
    done.clear();
  }

  void check_here() {
    if (forked())
      throw py::value_error("FusedRunner: started in process " + std::to_string(pid) +
                            "; this process is a child forked from it and the stream's thread is not here: "
                            "start a new stream");
  }

  // os.fork(), before: no batch running when it returns, none started until resume().
  void pause() {
    if (!th || forked()) return;
    py::gil_scoped_release nogil;
    std::unique_lock<std::mutex> lk(m);
    paused = true;
    cv->wait(lk, [&] { return !running; });
  }

  // os.fork(), after, in the parent.
  void resume() {
    if (forked()) return;
    {
      std::lock_guard<std::mutex> lk(m);
      paused = false;
    }
    cv->notify_all();
  }

  void loop() {
    std::unique_lock<std::mutex> lk(m);
    for (;;) {
      cv->wait(lk, [&] { return stop || (!todo.empty() && !failed && !paused); });
      if (stop) return;
      std::unique_ptr<Job> j = std::move(todo.front());
      todo.pop_front();
      running = true;
      lk.unlock();
      j->o = run_locked(*f, j->in->docs, j->r, j->ex, &j->snap);
      lk.lock();
      running = false;
      if (j->o.closed || j->o.foreign || j->o.s != LM_OK) failed = true;
      done.push_back(std::move(j));
      cv->notify_all();
    }
  }

  void submit(py::handle off, py::handle data, int nt) {
    check_here();
    auto j = std::make_unique<Job>();
    j->in = std::make_unique<DocsArg>(off, data, "FusedPipeline");
    j->ex = exec_for(nt);
    {
      std::lock_guard<std::mutex> lk(m);
      if (stop) throw py::value_error("FusedRunner: closed");
      if (todo.size() + done.size() + (running ? 1 : 0) >= max_jobs)
        throw py::value_error("FusedRunner: " + std::to_string(max_jobs) +
                              " batches are submitted and not collected: collect() first");
      todo.push_back(std::move(j));
      if (!th) {
        th.reset(new std::thread([this] { loop(); }));
        pid = getpid();
      }
    }
    cv->notify_all();
  }

  py::tuple collect() {
    check_here();
    std::unique_ptr<Job> j;
    {
      py::gil_scoped_release nogil;
      std::unique_lock<std::mutex> lk(m);
      cv->wait(lk, [&] { return stop || !done.empty() || (todo.empty() && !running) || (failed && !running); });
      if (!done.empty()) {
        j = std::move(done.front());
        done.pop_front();
      }
    }
    if (!j) {
      std::lock_guard<std::mutex> lk(m);
      if (stop) throw py::value_error("FusedRunner: closed");
      if (failed) throw py::value_error("FusedRunner: an earlier batch failed; this one did not run");
      throw py::value_error("FusedRunner: no batch submitted");
    }
    raise_outcome(*f, j->o);
    py::tuple t = result_tensors(j->r);
    py::list cyc;
    for (int k = 0; k < LM_PII_TYPE_COUNT; k++) cyc.append(py::int_(j->snap.cycle[k]));
    bool has[5] = {bool(f->cleaner), bool(f->quality), bool(f->dedup), bool(f->pii), bool(f->near)};
    py::object near_lsn = f->near ? py::object(py::int_(j->snap.near_lsn)) : py::object(py::none());
    return py::make_tuple(t[0], t[1], t[2], t[3], py::int_(j->snap.lsn), near_lsn, cyc,
                          counters_dict(j->snap.counters, has));
  }

  void close() {
    if (forked()) {
      abandon();
      return;
    }
    std::deque<std::unique_ptr<Job>> drop;
    {
      std::lock_guard<std::mutex> lk(m);
      stop = true;
      drop.swap(todo);
    }
    cv->notify_all();
    if (th && th->joinable()) {
      py::gil_scoped_release nogil;
      th->join();
    }
    std::lock_guard<std::mutex> lk(m);
    done.clear();
    // drop (the batches never run) dies here, with the GIL held
  }
};

// The live runners, for the fork hooks (changed with the GIL held).  weak_ptr: a hook holds the
// runners it waits for, so a runner dropped meanwhile by another thread outlives the wait.
std::vector<std::weak_ptr<FusedRunner>> &live_runners() {
  static auto *v = new std::vector<std::weak_ptr<FusedRunner>>;
  return *v;
}

std::vector<std::shared_ptr<FusedRunner>> take_live_runners() {
  std::vector<std::shared_ptr<FusedRunner>> out;
  auto &v = live_runners();
  size_t k = 0;
  for (auto &w : v) {
    if (auto r = w.lock()) {
      out.push_back(std::move(r));
      v[k++] = w;
    }
  }
  v.resize(k);
  return out;
}

}  // namespace

void bind_pipeline(py::module_ &m) {
  py::class_<Fused, std::shared_ptr<Fused>>(m, "FusedPipeline")
      .def(py::init<std::shared_ptr<Cleaner>, std::shared_ptr<Quality>, std::shared_ptr<Dedup>, std::shared_ptr<Pii>,
                    std::shared_ptr<NearDedup>>(),
           py::arg("cleaner").none(true), py::arg("quality").none(true), py::arg("dedup").none(true),
           py::arg("pii").none(true), py::arg("near_dedup").none(true) = py::none())
      .def(
          "run",
          [](Fused &f, py::handle off, py::handle data, int nt) {
            DocsArg in(off, data, "FusedPipeline");
            lm_exec ex = exec_for(nt);
            ResultGuard res;
            RunOutcome o;
            {
              py::gil_scoped_release nogil;
              o = run_locked(f, in.docs, res.r, ex, nullptr);
            }
            raise_outcome(f, o);
            return result_tensors(res.r);
          },
          py::arg("offsets"), py::arg("data"), py::arg("num_threads") = 0)
      .def("counters",
           [](Fused &f) {
             lm_fused_counters c;
             {
               std::lock_guard<std::mutex> lk(f.mu);
               lm_fused_get_counters(f.obj, &c);
             }
             bool has[5] = {bool(f.cleaner), bool(f.quality), bool(f.dedup), bool(f.pii), bool(f.near)};
             return counters_dict(c, has);
           })
      .def("retained_bytes",
           [](Fused &f) {
             size_t b = 0;
             std::lock_guard<std::mutex> lk(f.mu);
             lm_fused_retained_bytes(f.obj, &b);
             return py::int_(b);
           })
      .def("last_run",
           [](Fused &f) {
             lm_fused_run_info info;
             {
               std::lock_guard<std::mutex> lk(f.mu);
               lm_fused_last_run(f.obj, &info);
             }
             py::dict d;
             d["ranges"] = info.ranges1;
             d["workers"] = info.workers1;
             return d;
           })
      .def("reset_counters", [](Fused &f) {
        std::lock_guard<std::mutex> lk(f.mu);
        lm_fused_reset_counters(f.obj);
      })
      .def("get_pii_cycle", [](Fused &f) {
        uint64_t c[LM_PII_TYPE_COUNT];
        {
          std::lock_guard<std::mutex> lk(f.mu);
          lm_fused_get_pii_cycle(f.obj, c);
        }
        py::list out;
        for (int t = 0; t < LM_PII_TYPE_COUNT; t++) out.append(py::int_(c[t]));
        return out;
      })
      .def("set_pii_cycle", [](Fused &f, const py::sequence &seq) {
        std::vector<uint64_t> v;
        for (auto x : seq) v.push_back(x.cast<uint64_t>());
        if (v.size() != LM_PII_TYPE_COUNT)
          throw py::value_error("FusedPipeline.set_pii_cycle: expected " + std::to_string(LM_PII_TYPE_COUNT) +
                                " positions, got " + std::to_string(v.size()));
        std::lock_guard<std::mutex> lk(f.mu);
        lm_fused_set_pii_cycle(f.obj, v.data());
      });

  py::class_<FusedRunner, std::shared_ptr<FusedRunner>>(m, "FusedRunner")
      .def(py::init([](std::shared_ptr<Fused> f, size_t max_jobs) {
             if (!f) throw py::type_error("FusedRunner: fused must be a FusedPipeline");
             if (max_jobs < 1) throw py::value_error("FusedRunner: max_jobs must be >= 1");
             auto r = std::make_shared<FusedRunner>(std::move(f), max_jobs);
             take_live_runners();  // drops the expired entries
             live_runners().push_back(r);
             return r;
           }),
           py::arg("fused"), py::arg("max_jobs") = 2)
      .def("submit", &FusedRunner::submit, py::arg("offsets"), py::arg("data"), py::arg("num_threads") = 0)
      .def("collect", &FusedRunner::collect)
      .def("close", &FusedRunner::close);

  // os.fork(): the runners pause (no batch holds its locks at the fork), then the fork gate closes
  // (no stage call of any thread holds a stage object's mutex: bind_common.h); the parent opens it
  // and resumes them, the child gets a gate of its own.  The runners pause first: a runner's thread
  // that started a batch after the gate closed would wait at the gate with `running` set, and
  // pause() would wait for it.
  py::module_::import("os").attr("register_at_fork")(
      py::arg("before") = py::cpp_function([] {
        for (auto &r : take_live_runners()) r->pause();
        fork_gate_close();
      }),
      py::arg("after_in_parent") = py::cpp_function([] {
        fork_gate_open();
        for (auto &r : take_live_runners()) r->resume();
      }),
      py::arg("after_in_child") = py::cpp_function([] {
        fork_gate_reset_in_child();
        wal_indexes_abandon_in_child();  // the parent's logs: this copy no longer holds them open
      }));
}

}  // namespace luminamoon
