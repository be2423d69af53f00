// Bindings of the stateful core objects: register_stages() (called by
// module.cpp) plus the three per-document text stages — TextCleaner,
// QualityFilter, PIIMasker.  The deduplicator, the fused pipeline and the state
// tracker are in bind_dedup.cpp, bind_pipeline.cpp and bind_state.cpp.
// Every call validates its arguments first, then runs the core with the GIL
// released and one call at a time per object.
#include "bind_stages.h"

#include <cstring>

namespace luminamoon {

namespace {

template <typename Obj, typename Fn>
py::tuple run_stage(Obj &o, py::handle offsets, py::handle data, int num_threads, const char *what, Fn fn) {
  DocsArg in(offsets, data, what);
  lm_exec ex = exec_for(num_threads);
  ResultGuard res;
  lm_status s;
  {
    py::gil_scoped_release nogil;
    StageCall gate;
    std::lock_guard<std::mutex> lk(o.mu);
    s = fn(o.obj, &in.docs, &res.r, &ex);
  }
  if (s != LM_OK) raise_status(s, what);
  return result_tensors(res.r);
}

py::dict clean_counters(const lm_clean_counters &c) {
  py::dict d;
  d["docs_in"] = c.docs_in;
  d["docs_kept"] = c.docs_kept;
  d["docs_empty"] = c.docs_empty;
  d["docs_too_large"] = c.docs_too_large;
  d["bytes_in"] = c.bytes_in;
  d["bytes_out"] = c.bytes_out;
  d["invalid_sequences"] = c.invalid_sequences;
  d["control_removed"] = c.control_removed;
  d["spaces_folded"] = c.spaces_folded;
  d["spaces_collapsed"] = c.spaces_collapsed;
  d["trailing_trimmed"] = c.trailing_trimmed;
  d["blank_lines_removed"] = c.blank_lines_removed;
  d["docs_normalized"] = c.docs_normalized;
  return d;
}

py::dict quality_counters(const lm_quality_counters &c) {
  py::dict d, rules;
  d["docs_in"] = c.docs_in;
  d["docs_kept"] = c.docs_kept;
  d["docs_dropped"] = c.docs_dropped;
  d["docs_modified"] = c.docs_modified;
  d["bytes_in"] = c.bytes_in;
  d["bytes_out"] = c.bytes_out;
  d["too_large"] = c.too_large;
  for (int i = 0; i < LM_Q_RULE_COUNT; i++) rules[lm_quality_rule_name(i)] = c.rule[i];
  d["rules"] = rules;
  return d;
}

const char *const k_pii_types[LM_PII_TYPE_COUNT] = {"email", "ipv4", "ipv6", "phone", "credit_card", "iban"};

py::dict pii_counters(const lm_pii_counts &c) {
  py::dict d, m;
  for (int t = 0; t < LM_PII_TYPE_COUNT; t++) m[k_pii_types[t]] = c.matches[t];
  d["matches"] = m;
  d["docs"] = c.docs;
  d["docs_too_large"] = c.docs_too_large;
  d["docs_changed"] = c.docs_changed;
  d["bytes_in"] = c.bytes_in;
  d["bytes_out"] = c.bytes_out;
  return d;
}

py::dict cleaner_params_dict(const lm_cleaner_params &p) {
  py::dict d;
  d["normalize"] = int(p.normalize);
  d["remove_control"] = bool(p.remove_control);
  d["normalize_newlines"] = bool(p.normalize_newlines);
  d["fold_spaces"] = bool(p.fold_spaces);
  d["collapse_spaces"] = bool(p.collapse_spaces);
  d["trim_trailing"] = bool(p.trim_trailing);
  d["max_blank_lines"] = p.max_blank_lines;
  d["drop_empty"] = bool(p.drop_empty);
  d["max_doc_bytes"] = p.max_doc_bytes;
  return d;
}

py::dict quality_params_dict(const lm_quality_params &p) {
  py::dict d;
  d["enabled"] = p.enabled;
  d["c4_modify_text"] = bool(p.c4_modify_text);
  d["max_doc_bytes"] = p.max_doc_bytes;
  d["gr_dup_para_frac"] = p.gr_dup_para_frac;
  d["gr_dup_para_char_frac"] = p.gr_dup_para_char_frac;
  d["gr_dup_line_frac"] = p.gr_dup_line_frac;
  d["gr_dup_line_char_frac"] = p.gr_dup_line_char_frac;
  d["gr_top_ngram_frac"] = py::make_tuple(p.gr_top_ngram_frac[0], p.gr_top_ngram_frac[1], p.gr_top_ngram_frac[2]);
  py::list dn;
  for (double x : p.gr_dup_ngram_frac) dn.append(x);
  d["gr_dup_ngram_frac"] = py::tuple(dn);
  d["gq_min_doc_words"] = p.gq_min_doc_words;
  d["gq_max_doc_words"] = p.gq_max_doc_words;
  d["gq_min_avg_word_length"] = p.gq_min_avg_word_length;
  d["gq_max_avg_word_length"] = p.gq_max_avg_word_length;
  d["gq_max_symbol_word_ratio"] = p.gq_max_symbol_word_ratio;
  d["gq_max_bullet_lines_ratio"] = p.gq_max_bullet_lines_ratio;
  d["gq_max_ellipsis_lines_ratio"] = p.gq_max_ellipsis_lines_ratio;
  d["gq_min_alpha_words_ratio"] = p.gq_min_alpha_words_ratio;
  d["gq_min_stop_words"] = p.gq_min_stop_words;
  d["c4_min_sentences"] = p.c4_min_sentences;
  d["c4_min_words_per_line"] = p.c4_min_words_per_line;
  d["c4_max_word_length"] = p.c4_max_word_length;
  d["fw_line_punct_thr"] = p.fw_line_punct_thr;
  d["fw_line_punct_exclude_zero"] = bool(p.fw_line_punct_exclude_zero);
  d["fw_short_line_thr"] = p.fw_short_line_thr;
  d["fw_short_line_length"] = p.fw_short_line_length;
  d["fw_char_dup_ratio"] = p.fw_char_dup_ratio;
  d["fw_new_line_ratio"] = p.fw_new_line_ratio;
  return d;
}

void param_doubles(const py::dict &d, const char *name, double *out, size_t n, const char *what) {
  if (!d.contains(name)) return;
  py::handle v = d[name];
  if (!PySequence_Check(v.ptr()) || PyUnicode_Check(v.ptr()))
    throw py::type_error(std::string(what) + ": parameter " + name + " must be a sequence of " + std::to_string(n) +
                         " numbers");
  py::sequence s = py::reinterpret_borrow<py::sequence>(v);
  if (s.size() != n)
    throw py::value_error(std::string(what) + ": parameter " + name + " must have " + std::to_string(n) + " entries");
  for (size_t i = 0; i < n; i++) {
    py::dict one;
    one[name] = s[i];
    param_double(one, name, &out[i], what);
  }
}

}  // namespace

// ---------------------------------------------------------------- objects

// The stages' default max_doc_bytes (the core's default is 0 = no limit): twice
// the CLI's 64 MB record limit, so a record the CLI accepts is never refused,
// while one document's working memory stays bounded (QualityFilter <= ~16 B per
// byte).  Pass max_doc_bytes=0 for no limit, or a larger value.
static const size_t kDefaultMaxDocBytes = size_t(128) << 20;

Cleaner::Cleaner(const py::dict &p) {
  static const char *const known[] = {"normalize",       "remove_control", "normalize_newlines", "fold_spaces",
                                      "collapse_spaces", "trim_trailing",  "max_blank_lines",    "drop_empty",
                                      "max_doc_bytes",   nullptr};
  const char *w = "TextCleaner";
  check_keys(p, known, w);
  lm_cleaner_params_default(&params);
  int norm = int(params.normalize);
  param_int(p, "normalize", &norm, w, 0, 2);
  params.normalize = lm_normalization(norm);
  param_bool(p, "remove_control", &params.remove_control, w);
  param_bool(p, "normalize_newlines", &params.normalize_newlines, w);
  param_bool(p, "fold_spaces", &params.fold_spaces, w);
  param_bool(p, "collapse_spaces", &params.collapse_spaces, w);
  param_bool(p, "trim_trailing", &params.trim_trailing, w);
  param_int(p, "max_blank_lines", &params.max_blank_lines, w, -1, 1 << 30);
  param_bool(p, "drop_empty", &params.drop_empty, w);
  params.max_doc_bytes = kDefaultMaxDocBytes;
  param_size(p, "max_doc_bytes", &params.max_doc_bytes, w);
  lm_status s = lm_cleaner_create(&params, &obj);
  if (s) raise_status(s, w);
}

Quality::Quality(const py::dict &p) {
  static const char *const known[] = {"enabled",
                                      "c4_modify_text",
                                      "max_doc_bytes",
                                      "gr_dup_para_frac",
                                      "gr_dup_para_char_frac",
                                      "gr_dup_line_frac",
                                      "gr_dup_line_char_frac",
                                      "gr_top_ngram_frac",
                                      "gr_dup_ngram_frac",
                                      "gq_min_doc_words",
                                      "gq_max_doc_words",
                                      "gq_min_avg_word_length",
                                      "gq_max_avg_word_length",
                                      "gq_max_symbol_word_ratio",
                                      "gq_max_bullet_lines_ratio",
                                      "gq_max_ellipsis_lines_ratio",
                                      "gq_min_alpha_words_ratio",
                                      "gq_min_stop_words",
                                      "c4_min_sentences",
                                      "c4_min_words_per_line",
                                      "c4_max_word_length",
                                      "fw_line_punct_thr",
                                      "fw_line_punct_exclude_zero",
                                      "fw_short_line_thr",
                                      "fw_short_line_length",
                                      "fw_char_dup_ratio",
                                      "fw_new_line_ratio",
                                      nullptr};
  const char *w = "QualityFilter";
  check_keys(p, known, w);
  lm_quality_params_default(&params);
  param_u64(p, "enabled", &params.enabled, w);
  if (params.enabled >> LM_Q_RULE_COUNT) throw py::value_error("QualityFilter: 'enabled' has bits of unknown rules");
  param_bool(p, "c4_modify_text", &params.c4_modify_text, w);
  params.max_doc_bytes = kDefaultMaxDocBytes;
  param_size(p, "max_doc_bytes", &params.max_doc_bytes, w);
  param_double(p, "gr_dup_para_frac", &params.gr_dup_para_frac, w);
  param_double(p, "gr_dup_para_char_frac", &params.gr_dup_para_char_frac, w);
  param_double(p, "gr_dup_line_frac", &params.gr_dup_line_frac, w);
  param_double(p, "gr_dup_line_char_frac", &params.gr_dup_line_char_frac, w);
  param_doubles(p, "gr_top_ngram_frac", params.gr_top_ngram_frac, 3, w);
  param_doubles(p, "gr_dup_ngram_frac", params.gr_dup_ngram_frac, 6, w);
  param_size(p, "gq_min_doc_words", &params.gq_min_doc_words, w);
  param_size(p, "gq_max_doc_words", &params.gq_max_doc_words, w);
  param_double(p, "gq_min_avg_word_length", &params.gq_min_avg_word_length, w);
  param_double(p, "gq_max_avg_word_length", &params.gq_max_avg_word_length, w);
  param_double(p, "gq_max_symbol_word_ratio", &params.gq_max_symbol_word_ratio, w);
  param_double(p, "gq_max_bullet_lines_ratio", &params.gq_max_bullet_lines_ratio, w);
  param_double(p, "gq_max_ellipsis_lines_ratio", &params.gq_max_ellipsis_lines_ratio, w);
  param_double(p, "gq_min_alpha_words_ratio", &params.gq_min_alpha_words_ratio, w);
  param_size(p, "gq_min_stop_words", &params.gq_min_stop_words, w);
  param_size(p, "c4_min_sentences", &params.c4_min_sentences, w);
  param_size(p, "c4_min_words_per_line", &params.c4_min_words_per_line, w);
  param_size(p, "c4_max_word_length", &params.c4_max_word_length, w);
  param_double(p, "fw_line_punct_thr", &params.fw_line_punct_thr, w);
  param_bool(p, "fw_line_punct_exclude_zero", &params.fw_line_punct_exclude_zero, w);
  param_double(p, "fw_short_line_thr", &params.fw_short_line_thr, w);
  param_size(p, "fw_short_line_length", &params.fw_short_line_length, w);
  param_double(p, "fw_char_dup_ratio", &params.fw_char_dup_ratio, w);
  param_double(p, "fw_new_line_ratio", &params.fw_new_line_ratio, w);
  lm_status s = lm_quality_create(&params, &obj);
  if (s) raise_status(s, w);
}

Pii::Pii(const py::dict &p) {
  static const char *const known[] = {"mode", "types", "ipv4_public_only", "ipv6_public_only", "replacements",
                                      "cycle_across_documents", "max_doc_bytes", nullptr};
  const char *w = "PIIMasker";
  check_keys(p, known, w);
  int mode = 0;
  param_int(p, "mode", &mode, w, 0, 1);
  lm_pii_params_default(&params, lm_pii_mode(mode));
  uint64_t types = params.types;
  param_u64(p, "types", &types, w);
  if (types & ~uint64_t(LM_PII_ALL_TYPES)) throw py::value_error("PIIMasker: 'types' has unknown type bits");
  params.types = unsigned(types);
  param_bool(p, "ipv4_public_only", &params.ipv4_public_only, w);
  param_bool(p, "ipv6_public_only", &params.ipv6_public_only, w);
  param_bool(p, "cycle_across_documents", &params.cycle_across_documents, w);
  params.max_doc_bytes = kDefaultMaxDocBytes;
  param_size(p, "max_doc_bytes", &params.max_doc_bytes, w);
  if (p.contains("replacements") && !p["replacements"].is_none()) {
    py::handle r = p["replacements"];
    if (!PyDict_Check(r.ptr()))
      throw py::type_error("PIIMasker: replacements must be a dict {type name: str or list of str}");
    for (auto kv : py::reinterpret_borrow<py::dict>(r)) {
      std::string name = py::str(kv.first);
      int t = -1;
      for (int k = 0; k < LM_PII_TYPE_COUNT; k++)
        if (name == k_pii_types[k]) t = k;
      if (t < 0)
        throw py::value_error("PIIMasker: unknown PII type '" + name +
                              "' in replacements (valid: email, ipv4, ipv6, phone, credit_card, iban)");
      std::vector<std::string> vals;
      auto utf8 = [&](py::handle x) {
        Py_ssize_t len;
        const char *p = PyUnicode_AsUTF8AndSize(x.ptr(), &len);
        if (!p) {
          PyErr_Clear();
          throw py::value_error("PIIMasker: replacements['" + name +
                                "'] is not encodable as UTF-8 (a lone surrogate?)");
        }
        return std::string(p, size_t(len));
      };
      if (py::isinstance<py::str>(kv.second)) {
        vals.push_back(utf8(kv.second));
      } else {
        if (!PySequence_Check(kv.second.ptr()))
          throw py::type_error("PIIMasker: replacements['" + name + "'] must be a str or a list of str");
        for (auto x : py::reinterpret_borrow<py::sequence>(kv.second)) {
          if (!py::isinstance<py::str>(x))
            throw py::type_error("PIIMasker: replacements['" + name + "'] must hold str");
          vals.push_back(utf8(x));
        }
      }
      if (vals.empty()) throw py::value_error("PIIMasker: replacements['" + name + "'] is empty");
      for (auto &v : vals)
        if (v.find('\0') != std::string::npos)
          throw py::value_error("PIIMasker: replacements['" + name + "'] holds a NUL character");
      repl_store[t] = std::move(vals);
    }
  }
  for (int t = 0; t < LM_PII_TYPE_COUNT; t++) {
    for (auto &v : repl_store[t]) repl_ptrs[t].push_back(v.c_str());
    params.replacements[t] = repl_ptrs[t].empty() ? nullptr : repl_ptrs[t].data();
    params.n_replacements[t] = repl_ptrs[t].size();
  }
  lm_status s = lm_pii_create(&params, &obj);
  if (s) raise_status(s, w);
}

// ---------------------------------------------------------------- bindings

void bind_text_stages(py::module_ &m) {
  m.def("cleaner_params_default", []() {
    lm_cleaner_params p;
    lm_cleaner_params_default(&p);
    p.max_doc_bytes = kDefaultMaxDocBytes;
    return cleaner_params_dict(p);
  });
  m.def("quality_params_default", []() {
    lm_quality_params p;
    lm_quality_params_default(&p);
    p.max_doc_bytes = kDefaultMaxDocBytes;
    return quality_params_dict(p);
  });
  m.def("quality_rules", []() {
    // [(id, name, rule set id)]
    py::list out;
    for (int i = 0; i < lm_quality_rule_count(); i++)
      out.append(py::make_tuple(i, lm_quality_rule_name(i), int(lm_quality_rule_set_of(i))));
    return out;
  });
  m.def("pii_types", []() {
    py::list out;
    for (auto t : k_pii_types) out.append(t);
    return out;
  });

  py::class_<Cleaner, std::shared_ptr<Cleaner>>(m, "TextCleaner")
      .def(py::init<const py::dict &>(), py::arg("params"))
      .def(
          "run",
          [](Cleaner &o, py::handle off, py::handle data, int nt) {
            return run_stage(o, off, data, nt, "TextCleaner", lm_cleaner_run);
          },
          py::arg("offsets"), py::arg("data"), py::arg("num_threads") = 0)
      .def("counters",
           [](Cleaner &o) {
             lm_clean_counters c;
             {
               std::lock_guard<std::mutex> lk(o.mu);
               lm_cleaner_get_counters(o.obj, &c);
             }
             return clean_counters(c);
           })
      .def("reset_counters",
           [](Cleaner &o) {
             std::lock_guard<std::mutex> lk(o.mu);
             lm_cleaner_reset_counters(o.obj);
           })
      .def("params", [](Cleaner &o) { return cleaner_params_dict(o.params); });

  py::class_<Quality, std::shared_ptr<Quality>>(m, "QualityFilter")
      .def(py::init<const py::dict &>(), py::arg("params"))
      .def(
          "run",
          [](Quality &o, py::handle off, py::handle data, int nt) {
            return run_stage(o, off, data, nt, "QualityFilter", lm_quality_run);
          },
          py::arg("offsets"), py::arg("data"), py::arg("num_threads") = 0)
      .def("counters",
           [](Quality &o) {
             lm_quality_counters c;
             {
               std::lock_guard<std::mutex> lk(o.mu);
               lm_quality_get_counters(o.obj, &c);
             }
             return quality_counters(c);
           })
      .def("reset_counters",
           [](Quality &o) {
             std::lock_guard<std::mutex> lk(o.mu);
             lm_quality_reset_counters(o.obj);
           })
      .def("params", [](Quality &o) { return quality_params_dict(o.params); });

  py::class_<Pii, std::shared_ptr<Pii>>(m, "PIIMasker")
      .def(py::init<const py::dict &>(), py::arg("params"))
      .def(
          "run",
          [](Pii &o, py::handle off, py::handle data, int nt) {
            return run_stage(o, off, data, nt, "PIIMasker", lm_pii_run);
          },
          py::arg("offsets"), py::arg("data"), py::arg("num_threads") = 0)
      .def("counters",
           [](Pii &o) {
             lm_pii_counts c;
             {
               std::lock_guard<std::mutex> lk(o.mu);
               lm_pii_get_counters(o.obj, &c);
             }
             return pii_counters(c);
           })
      .def("reset_counters",
           [](Pii &o) {
             std::lock_guard<std::mutex> lk(o.mu);
             lm_pii_reset_counters(o.obj);
           })
      .def("get_cycle",
           [](Pii &o) {
             uint64_t c[LM_PII_TYPE_COUNT];
             {
               std::lock_guard<std::mutex> lk(o.mu);
               lm_pii_get_cycle(o.obj, c);
             }
             py::list out;
             for (int t = 0; t < LM_PII_TYPE_COUNT; t++) out.append(py::int_(c[t]));
             return out;
           })
      .def("set_cycle",
           [](Pii &o, const py::sequence &seq) {
             std::vector<uint64_t> v;
             for (auto x : seq) v.push_back(x.cast<uint64_t>());
             if (v.size() != LM_PII_TYPE_COUNT)
               throw py::value_error("PIIMasker.set_cycle: expected " + std::to_string(LM_PII_TYPE_COUNT) +
                                     " positions, got " + std::to_string(v.size()));
             std::lock_guard<std::mutex> lk(o.mu);
             lm_pii_set_cycle(o.obj, v.data());
           })
      .def("find",
           [](Pii &o, py::bytes text) {
             std::string s = text;
             std::vector<lm_pii_match> ms(16);
             size_t n = 0;
             lm_status st;
             {
               py::gil_scoped_release nogil;
               st = lm_pii_find(o.obj, reinterpret_cast<const uint8_t *>(s.data()), s.size(), ms.data(), ms.size(), &n);
               if (st == LM_OK && n > ms.size()) {
                 ms.resize(n);
                 st = lm_pii_find(o.obj, reinterpret_cast<const uint8_t *>(s.data()), s.size(), ms.data(), ms.size(),
                                  &n);
               }
             }
             if (st == LM_ETOOBIG)
               throw py::value_error("PIIMasker.find: text has " + std::to_string(s.size()) +
                                     " bytes, more than the masker's max_doc_bytes=" +
                                     std::to_string(o.params.max_doc_bytes));
             if (st) raise_status(st, "PIIMasker.find");
             py::list out;
             for (size_t i = 0; i < n; i++) out.append(py::make_tuple(k_pii_types[ms[i].type], ms[i].start, ms[i].end));
             return out;
           });
}

py::dict fused_pii_counters(const lm_pii_counts &c) { return pii_counters(c); }
py::dict fused_clean_counters(const lm_clean_counters &c) { return clean_counters(c); }
py::dict fused_quality_counters(const lm_quality_counters &c) { return quality_counters(c); }

void register_stages(py::module_ &m) {
  register_errors(m);
  bind_text_stages(m);
  bind_dedup(m);
  bind_pipeline(m);
  bind_state(m);
}

}  // namespace luminamoon
