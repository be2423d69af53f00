// Bindings of the stateful core objects (text stages, deduplicator, state).
// Filled in as the stages land; kept apart from module.cpp by concept.
#include <torch/extension.h>

namespace py = pybind11;

namespace luminamoon {
void register_stages(py::module_ &m) { (void)m; }
}  // namespace luminamoon
