// pushpull._core: the client library's calls for Python, over NumPy buffers and without copies.
// A push sends the caller's array as it is (the library holds a reference to it until the push is
// done); a pull writes into the caller's array, or a new one. The GIL is released while a call
// sends or waits. pushpull/__init__.py builds the Pythonic layer on it (connect(), optimizers,
// torch tensors, the context manager).
//
// Threading: the library's own threads never touch a Python object. The references it holds are
// dropped on those threads, so they are queued (ReleaseLater) and released by the next call from
// Python, under the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <atomic>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "optimizers/optimizer.h"
#include "pushpull/pushpull.h"

namespace py = pybind11;

namespace pushpull {
namespace python {
namespace {

// pushpull.Error and a subclass per status code, made at import (MakeErrors).
std::array<PyObject*, static_cast<size_t>(Code::kLastCode) + 1> g_errors{};

[[noreturn]] void Raise(const Status& s) {
  PyObject* cls = g_errors[static_cast<size_t>(s.code())];
  PyErr_SetString(cls != nullptr ? cls : PyExc_RuntimeError, s.message().c_str());
  throw py::error_already_set();
}

void Check(const Status& s) {
  if (!s.ok()) Raise(s);
}

// References the library holds (pushed arrays), dropped by its threads: released under the GIL
// by the next call from Python.
Mutex g_release_mu;
std::vector<PyObject*> g_release GUARDED_BY(g_release_mu);
std::atomic<int64_t> g_held{0};  // references the library holds now

void ReleasePending() {
  std::vector<PyObject*> objects;
  {
    MutexLock l(&g_release_mu);
    objects.swap(g_release);
  }
  for (PyObject* o : objects) Py_DECREF(o);
}

// The array as the owner of a push's floats: a reference the library keeps until it is done.
std::shared_ptr<const void> Hold(const py::object& o) {
  PyObject* p = o.ptr();
  Py_INCREF(p);
  g_held.fetch_add(1);
  return std::shared_ptr<const void>(p, [](const void* q) {
    g_held.fetch_sub(1);
    MutexLock l(&g_release_mu);
    g_release.push_back(static_cast<PyObject*>(const_cast<void*>(q)));
  });
}

// What a call may be given: float32, C-contiguous, `floats` of them; `what` names it in errors.
py::array FloatArray(const py::handle& h, const char* what, bool writable) {
  if (!py::isinstance<py::array>(h))
    Raise(Status::InvalidArgument(std::string(what) + " must be a NumPy array or a CPU torch tensor of float32, not " +
                                  std::string(py::str(py::type::handle_of(h).attr("__name__")))));
  py::array a = py::reinterpret_borrow<py::array>(h);
  if (!a.dtype().is(py::dtype::of<float>()))
    Raise(Status::InvalidArgument(std::string(what) + " must be float32, not " + std::string(py::str(a.dtype())) +
                                  " (convert it once: a.astype(numpy.float32))"));
  if (!(a.flags() & py::array::c_style))
    Raise(Status::InvalidArgument(std::string(what) +
                                  " must be C-contiguous (numpy.ascontiguousarray(a), or tensor.contiguous())"));
  if (writable && !a.writeable()) Raise(Status::InvalidArgument(std::string(what) + " is read-only"));
  return a;
}

// Keys from an integer array or sequence, as the library's u64 keys; negative ones refused.
Client::KeyBuffer Keys(const py::handle& h) {
  py::array a;
  if (py::isinstance<py::array>(h)) {
    a = py::reinterpret_borrow<py::array>(h);
  } else {
    a = py::array::ensure(h);
    if (!a) Raise(Status::InvalidArgument("keys must be an array or sequence of integers"));
  }
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u')
    Raise(Status::InvalidArgument("keys must be integers (uint64 or int64), not " + std::string(py::str(a.dtype()))));
  if (a.ndim() > 1) Raise(Status::InvalidArgument("keys must be one-dimensional"));
  auto keys = std::make_shared<std::vector<Key>>(a.size());
  if (kind == 'u') {
    py::array_t<uint64_t, py::array::forcecast> u(a);
    std::copy(u.data(), u.data() + u.size(), keys->begin());
  } else {
    py::array_t<int64_t, py::array::forcecast> s(a);
    for (py::ssize_t i = 0; i < s.size(); ++i) {
      if (s.data()[i] < 0) Raise(Status::InvalidArgument("keys must be >= 0, not " + std::to_string(s.data()[i])));
      (*keys)[i] = static_cast<Key>(s.data()[i]);
    }
  }
  return keys;
}

// A value as an error message shows it: its type and its repr, cut short ("str 'name'").
std::string Show(const py::handle& h) {
  std::string repr = py::repr(h);
  if (repr.size() > 60) repr = repr.substr(0, 57) + "...";
  return std::string(py::str(py::type::handle_of(h).attr("__name__"))) + " " + repr;
}

class PyClient;

// A table as created by one client: calls through another client are refused.
struct PyTable {
  Table table;
  const PyClient* owner = nullptr;
};

// A push or pull in flight. A pull's Future keeps its destination array alive.
class PyFuture {
 public:
  PyFuture(Future f, py::object out) : f_(std::move(f)), out_(std::move(out)) {}
  // The pull's values (its array) or None; raises the call's error. timeout: seconds (None: the
  // client's request timeout); a wait that expires gives the call up (DeadlineExceeded).
  py::object Wait(const py::object& timeout) {
    std::optional<double> seconds;
    if (!timeout.is_none()) {
      const double t = PyFloat_AsDouble(timeout.ptr());  // any number: int, float, NumPy's
      if (t == -1.0 && PyErr_Occurred()) {
        // A TypeError as the package's own checks raise (pushpull/__init__.py, _check).
        PyErr_Clear();
        throw py::type_error("wait(timeout): expected seconds (a number) or None, got " + Show(timeout));
      }
      seconds = t;
    }
    ReleasePending();
    Status s;
    {
      py::gil_scoped_release unlocked;
      s = seconds ? f_.WaitFor(static_cast<int64_t>(std::ceil(std::max(0.0, *seconds) * 1000))) : f_.Wait();
    }
    ReleasePending();
    Check(s);
    return out_;
  }
  bool Done() const { return f_.Ready(); }

 private:
  Future f_;
  py::object out_;
};

class PyClient {
 public:
  explicit PyClient(std::unique_ptr<Client> c) : c_(std::move(c)) {}
  ~PyClient() {
    // The library's threads stop here; one may wait for nothing of Python's, but the caller
    // should not hold the GIL while they are joined.
    py::gil_scoped_release unlocked;
    c_.reset();
  }

  Client& c() const { return *c_; }

  PyTable CreateTable(const TableSpec& spec) {
    ReleasePending();
    Result<Table> t = [&] {
      py::gil_scoped_release unlocked;
      return c_->CreateTable(spec);
    }();
    if (!t.ok()) Raise(t.status());
    return PyTable{*t, this};
  }

  // A pull into `out` (float32, its size the rows') or a new array: dense when keys is None.
  PyFuture PullAsync(const PyTable& t, const py::object& keys, const py::object& out, bool lookup) {
    ReleasePending();
    CheckTable(t);
    Client::KeyBuffer k;
    size_t rows = t.table.rows;
    if (!keys.is_none()) {
      k = Keys(keys);
      rows = k->size();
    } else if (t.table.sparse) {
      Raise(Status::InvalidArgument("table '" + t.table.name + "' is sparse: a pull names its keys"));
    }
    const size_t dim = t.table.dim;
    py::array dest;
    if (out.is_none()) {
      dest = py::array_t<float>({static_cast<py::ssize_t>(rows), static_cast<py::ssize_t>(dim)});
    } else {
      dest = FloatArray(out, "out", /*writable=*/true);
      if (static_cast<size_t>(dest.size()) != rows * dim)
        Raise(Status::InvalidArgument("out holds " + std::to_string(dest.size()) + " floats; the pull of '" +
                                      t.table.name + "' writes " + std::to_string(rows) + " rows of " +
                                      std::to_string(dim) + " = " + std::to_string(rows * dim)));
    }
    PullOptions o;
    o.keys = std::move(k);  // (null: the whole dense table)
    o.out = static_cast<float*>(dest.mutable_data());
    o.create = !lookup;
    Future f;
    {
      py::gil_scoped_release unlocked;
      f = c_->Pull(t.table, o);
    }
    return PyFuture(std::move(f), out.is_none() ? py::object(dest) : out);
  }

  PyFuture PushAsync(const PyTable& t, const py::object& grads, const py::object& keys) {
    ReleasePending();
    CheckTable(t);
    py::array g = FloatArray(grads, "grads", /*writable=*/false);
    Client::KeyBuffer k;
    size_t rows = t.table.rows;
    if (!keys.is_none()) {
      k = Keys(keys);
      rows = k->size();
    } else if (t.table.sparse) {
      Raise(Status::InvalidArgument("table '" + t.table.name + "' is sparse: a push names its keys"));
    }
    if (static_cast<size_t>(g.size()) != rows * t.table.dim)
      Raise(Status::InvalidArgument("grads hold " + std::to_string(g.size()) + " floats; a push to '" + t.table.name +
                                    "' of " + std::to_string(rows) + " rows of " + std::to_string(t.table.dim) +
                                    " needs " + std::to_string(rows * t.table.dim)));
    SharedFloats floats = SharedFloats::View(static_cast<const float*>(g.data()), g.size(), Hold(grads));
    Future f;
    {
      py::gil_scoped_release unlocked;
      f = k ? c_->Push(t.table, k, std::move(floats)) : c_->PushDense(t.table, std::move(floats));
    }
    return PyFuture(std::move(f), py::none());
  }

  // Clock, Barrier, Finish...: a call that may wait, without the GIL.
  template <typename F>
  void Blocking(F&& f) {
    ReleasePending();
    Status s;
    {
      py::gil_scoped_release unlocked;
      s = f();
    }
    ReleasePending();
    Check(s);
  }

 private:
  void CheckTable(const PyTable& t) const {
    if (t.owner != this)
      Raise(Status::InvalidArgument("table '" + t.table.name +
                                    "' belongs to another client: use the table this client created"));
  }

  std::unique_ptr<Client> c_;
};

std::unique_ptr<PyClient> Connect(const ClientOptions& o) {
  ReleasePending();
  Result<std::unique_ptr<Client>> c = [&] {
    py::gil_scoped_release unlocked;
    return Client::Connect(o);
  }();
  if (!c.ok()) Raise(c.status());
  return std::make_unique<PyClient>(std::move(*c));
}

void MakeErrors(py::module_& m) {
  PyObject* base = PyErr_NewExceptionWithDoc(
      "pushpull.Error", "A pushpull call failed. .code names why (a subclass per code).", PyExc_Exception, nullptr);
  m.add_object("Error", py::handle(base));
  for (size_t i = 1; i < g_errors.size(); ++i) {
    const Code code = static_cast<Code>(i);
    // Each also derives from the built-in exception a Python program would catch for it.
    PyObject* builtin = code == Code::kInvalidArgument     ? PyExc_ValueError
                        : code == Code::kNotFound          ? PyExc_LookupError
                        : code == Code::kDeadlineExceeded  ? PyExc_TimeoutError
                        : code == Code::kUnavailable       ? PyExc_ConnectionError
                        : code == Code::kResourceExhausted ? PyExc_MemoryError
                                                           : nullptr;
    py::tuple bases =
        builtin != nullptr ? py::make_tuple(py::handle(base), py::handle(builtin)) : py::make_tuple(py::handle(base));
    const std::string name = std::string("pushpull.") + CodeName(code);
    PyObject* cls = PyErr_NewException(name.c_str(), bases.ptr(), nullptr);
    if (cls == nullptr) throw py::error_already_set();
    PyObject_SetAttrString(cls, "code", py::str(CodeName(code)).ptr());
    g_errors[i] = cls;
    m.add_object(CodeName(code), py::handle(cls));
  }
  g_errors[0] = base;
}

// The error code of that name ("TargetMissed"): the code of a pushpull.Error, which leave()
// sends on. The scheduler acts on it as on a C++ worker's, such as a setup error's exit 2.
Code CodeNamed(const std::string& name) {
  for (size_t i = 1; i < g_errors.size(); ++i)
    if (name == CodeName(static_cast<Code>(i))) return static_cast<Code>(i);
  Raise(Status::InvalidArgument("no error code is named '" + name + "'"));
}

std::string ModelName(const Consistency& c) { return c.ToString(); }

const char* ScheduleName(opt::ScheduleKind k) {
  switch (k) {
    case opt::ScheduleKind::kConstant: return "constant";
    case opt::ScheduleKind::kStep: return "step";
    case opt::ScheduleKind::kCosine: return "cosine";
  }
  return "constant";
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "pushpull's client library (use the pushpull package, not this module)";
  MakeErrors(m);
  m.def(
      "version", [] { return std::string(Version()); }, "the release of the library linked in");
  m.def(
      "held_buffers", [] { return g_held.load(); },
      "arrays the library holds now for pushes in flight (each sent without a copy)");

  py::class_<opt::OptimizerConfig> optimizer(m, "OptimizerConfig",
                                             "a table's optimizer; made by pushpull.SGD, Adam, ...");
  // The schedule's settings, as attributes of the optimizer's (its kind is `schedule`, below).
  auto schedule_field = [&optimizer](const char* name, auto opt::ScheduleConfig::*field) {
    using T = std::remove_reference_t<decltype(std::declval<opt::ScheduleConfig>().*field)>;
    optimizer.def_property(
        name, [field](const opt::OptimizerConfig& c) { return c.schedule.*field; },
        [field](opt::OptimizerConfig& c, T v) { c.schedule.*field = v; });
  };
  schedule_field("warmup_steps", &opt::ScheduleConfig::warmup_steps);
  schedule_field("step_size", &opt::ScheduleConfig::step_size);
  schedule_field("gamma", &opt::ScheduleConfig::gamma);
  schedule_field("total_steps", &opt::ScheduleConfig::total_steps);
  schedule_field("min_lr_ratio", &opt::ScheduleConfig::min_lr_ratio);
  optimizer.def(py::init<>())
      .def(
          "copy", [](const opt::OptimizerConfig& c) { return c; }, "an independent copy")
      .def_property(
          "kind", [](const opt::OptimizerConfig& c) { return std::string(opt::KindName(c.kind)); },
          [](opt::OptimizerConfig& c, const std::string& k) {
            auto kind = opt::ParseKind(k);
            if (!kind.ok()) Raise(kind.status());
            c.kind = *kind;
          })
      .def_readwrite("lr", &opt::OptimizerConfig::lr)
      .def_readwrite("momentum", &opt::OptimizerConfig::momentum)
      .def_readwrite("nesterov", &opt::OptimizerConfig::nesterov)
      .def_readwrite("weight_decay", &opt::OptimizerConfig::weight_decay)
      .def_readwrite("beta1", &opt::OptimizerConfig::beta1)
      .def_readwrite("beta2", &opt::OptimizerConfig::beta2)
      .def_readwrite("epsilon", &opt::OptimizerConfig::epsilon)
      .def_readwrite("amsgrad", &opt::OptimizerConfig::amsgrad)
      .def_readwrite("initial_accumulator", &opt::OptimizerConfig::initial_accumulator)
      .def_readwrite("ftrl_alpha", &opt::OptimizerConfig::ftrl_alpha)
      .def_readwrite("ftrl_beta", &opt::OptimizerConfig::ftrl_beta)
      .def_readwrite("ftrl_l1", &opt::OptimizerConfig::ftrl_l1)
      .def_readwrite("ftrl_l2", &opt::OptimizerConfig::ftrl_l2)
      .def_readwrite("clip_norm", &opt::OptimizerConfig::clip_norm)
      .def_readwrite("staleness_aware", &opt::OptimizerConfig::staleness_aware)
      .def_property(
          "schedule", [](const opt::OptimizerConfig& c) { return std::string(ScheduleName(c.schedule.kind)); },
          [](opt::OptimizerConfig& c, const std::string& k) {
            auto kind = opt::ParseScheduleKind(k);
            if (!kind.ok()) Raise(kind.status());
            c.schedule.kind = *kind;
          })
      .def("validate", [](const opt::OptimizerConfig& c) { Check(opt::Validate(c)); })
      .def(
          "scheduled_lr", [](const opt::OptimizerConfig& c, int64_t step) { return opt::ScheduledLr(c, step); },
          "the learning rate the servers apply at the table's step `step` (0-based)")
      .def("__eq__", [](const opt::OptimizerConfig& a, const opt::OptimizerConfig& b) { return a == b; });

  py::class_<ClientOptions>(m, "ClientOptions")
      .def(py::init<>())
      .def_readwrite("scheduler", &ClientOptions::scheduler)
      .def_readwrite("requested_rank", &ClientOptions::requested_rank)
      .def_readwrite("consistency", &ClientOptions::consistency)
      .def_readwrite("request_timeout_ms", &ClientOptions::request_timeout_ms)
      .def_readwrite("heartbeat_interval_ms", &ClientOptions::heartbeat_interval_ms)
      .def_readwrite("scheduler_timeout_ms", &ClientOptions::scheduler_timeout_ms)
      .def_readwrite("register_timeout_ms", &ClientOptions::register_timeout_ms)
      .def_readwrite("connect_timeout_ms", &ClientOptions::connect_timeout_ms)
      .def_readwrite("max_unanswered_mb", &ClientOptions::max_unanswered_mb);

  py::class_<PyTable>(m, "Table", "a table as created: pass it to pull and push")
      .def_property_readonly("name", [](const PyTable& t) { return t.table.name; })
      .def_property_readonly("id", [](const PyTable& t) { return t.table.id; })
      .def_property_readonly("rows", [](const PyTable& t) { return t.table.rows; })
      .def_property_readonly("dim", [](const PyTable& t) { return t.table.dim; })
      .def_property_readonly("sparse", [](const PyTable& t) { return t.table.sparse; })
      .def_property_readonly("consistency", [](const PyTable& t) { return ModelName(t.table.consistency); })
      .def("__repr__", [](const PyTable& t) {
        return "<pushpull.Table '" + t.table.name + "' " + (t.table.sparse ? "sparse" : std::to_string(t.table.rows)) +
               " x " + std::to_string(t.table.dim) + ", " + ModelName(t.table.consistency) + ">";
      });

  py::class_<PyFuture>(m, "Future", "a push or pull in flight")
      .def("wait", &PyFuture::Wait, py::arg("timeout") = py::none(),
           "waits for the call (timeout in seconds; None: the client's request timeout) and returns a pull's "
           "array (None for a push); raises the call's error. An expired wait gives the call up.")
      .def("done", &PyFuture::Done, "whether the call has completed (it never gives it up)");

  py::class_<PyClient>(m, "Client")
      .def_property_readonly("rank", [](const PyClient& c) { return c.c().rank(); })
      .def_property_readonly("num_workers", [](const PyClient& c) { return c.c().num_workers(); })
      .def_property_readonly("num_servers", [](const PyClient& c) { return c.c().num_servers(); })
      .def_property_readonly("consistency", [](const PyClient& c) { return ModelName(c.c().consistency()); })
      .def_property_readonly("current_clock", [](const PyClient& c) { return c.c().clock(); })
      .def_property_readonly("replacement", [](const PyClient& c) { return c.c().replacement(); })
      .def_property_readonly("checkpoints_enabled", [](const PyClient& c) { return c.c().checkpoints_enabled(); })
      .def_property_readonly("restored_run", [](const PyClient& c) { return c.c().restored_run(); })
      .def("_create_table",
           [](PyClient& c, const std::string& name, uint64_t rows, uint32_t dim, bool sparse,
              const opt::OptimizerConfig& optimizer, const std::string& consistency, const std::string& init,
              float init_scale, uint64_t seed) {
             TableSpec spec;
             spec.name = name;
             spec.rows = rows;
             spec.dim = dim;
             spec.sparse = sparse;
             spec.optimizer = optimizer;
             auto model = ParseConsistency(consistency.empty() ? c.c().consistency().ToString() : consistency);
             if (!model.ok()) Raise(model.status());
             spec.consistency = *model;
             auto kind = ParseInitKind(init);
             if (!kind.ok()) Raise(kind.status());
             spec.init = *kind;
             spec.init_scale = init_scale;
             spec.seed = seed;
             Check(spec.Validate());
             return c.CreateTable(spec);
           })
      .def("_pull_async", &PyClient::PullAsync)
      .def("_push_async", &PyClient::PushAsync)
      .def("_clock", [](PyClient& c) { c.Blocking([&] { return c.c().Clock(); }); })
      .def("_barrier", [](PyClient& c) { c.Blocking([&] { return c.c().Barrier(); }); })
      .def("_checkpoint",
           [](PyClient& c, const std::string& run) { c.Blocking([&] { return c.c().Checkpoint(run); }); })
      .def("_finish", [](PyClient& c) { c.Blocking([&] { return c.c().Finish(); }); })
      .def(
          "_leave",
          [](PyClient& c, const std::string& code, const std::string& why) {
            const Status left(CodeNamed(code), why);
            c.Blocking([&] { return c.c().Leave(left); });
          },
          py::arg("code"), py::arg("why"))
      .def("_stats", [](const PyClient& c) {
        const ClientStats s = c.c().stats();
        py::dict d;
        d["pushes"] = s.pushes;
        d["pulls"] = s.pulls;
        d["clocks"] = s.clocks;
        d["bytes_sent"] = s.bytes_sent;
        d["bytes_received"] = s.bytes_received;
        d["max_staleness"] = s.max_staleness;
        d["resent"] = s.resent;
        d["unanswered_bytes"] = s.unanswered_bytes;
        d["waits_for_room"] = s.waits_for_room;
        d["pulls_dropped"] = s.pulls_dropped;
        return d;
      });

  m.def("_connect", &Connect, "joins the job (see pushpull.connect)");

  // The baselines of the Python benchmarks (apps/bench/python_bench.py): the same calls as a
  // Python loop makes, made from C++ with the same client, tables and arrays.
  m.def("_bench_steps", [](PyClient& c, const std::vector<PyTable>& tables, const std::vector<py::array>& grads,
                           const std::vector<py::array>& outs, int iterations, bool clock) {
    if (tables.size() != grads.size() || tables.size() != outs.size())
      Raise(Status::InvalidArgument("a table, a gradient and an out array each"));
    std::vector<SharedFloats> g;
    std::vector<float*> o;
    for (size_t i = 0; i < tables.size(); ++i) {
      py::array a = FloatArray(grads[i], "grads", false);
      g.push_back(SharedFloats::View(static_cast<const float*>(a.data()), a.size(), Hold(a)));
      o.push_back(static_cast<float*>(FloatArray(outs[i], "out", true).mutable_data()));
    }
    Status s;
    {
      py::gil_scoped_release unlocked;
      std::vector<Future> f(tables.size());
      for (int it = 0; it < iterations && s.ok(); ++it) {
        for (size_t i = 0; i < tables.size(); ++i) c.c().PushDense(tables[i].table, g[i]);
        if (clock) s = c.c().Clock();
        for (size_t i = 0; i < tables.size(); ++i) f[i] = c.c().PullDense(tables[i].table, o[i]);
        for (size_t i = 0; i < tables.size() && s.ok(); ++i) s = f[i].Wait();
      }
    }
    g.clear();
    ReleasePending();
    Check(s);
  });
}

}  // namespace python
}  // namespace pushpull
