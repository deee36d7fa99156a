/* attn_cudnn.cpp: causal grouped-query attention through cuDNN's fused SDPA (flash
 * attention), forward and backward, for the CUDA backend (cuda_backend.c).
 *
 * What it does:
 *  - builds cuDNN frontend graphs (the graph API: Graph::sdpa, Graph::sdpa_backward) for
 *    the backend's layout: q [batch*T, ldq] with head h at column h*D, k/v [batch*T, ld]
 *    with kv head g at column g*D, out [batch*T, Hq*D], dq/dk/dv with row stride ldd,
 *    lse F32 [batch][Hq][T] (natural-log log-sum-exp of the scaled scores: the same
 *    quantity the cuBLAS path keeps, so either path's backward reads either's forward);
 *  - the backward asks for cuDNN's deterministic algorithm, so `--check` runs are
 *    reproducible bit for bit;
 *  - a built plan (or cuDNN's refusal of the shape) is cached per (direction, shape,
 *    strides, handle slot); each of the
 *    backend's three scratch slots (compute, second compute, collective lane) has its
 *    own cudnnHandle_t, as it has its own cuBLAS handle;
 *  - libcudnn.so.9 is opened at run time (dlopen, the frontend's dynamic loading), so a
 *    libppsrt built with this file links and runs where cuDNN is absent: create then
 *    fails with the reason and the backend keeps its cuBLAS path.
 *
 * What it does not: no dropout, no bias or padding masks, no FP8, no other dtype than
 * bf16; nothing here allocates device memory (the backend passes its scratch). Every
 * entry point catches the frontend's exceptions and returns a message: nothing throws
 * into C, nothing exits. */
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING 1
#include <cudnn_frontend.h>

#include <dlfcn.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "attn_cudnn.h"

namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr;   /* the frontend's dynamic loading reads this */
}

namespace fe = cudnn_frontend;

namespace {

std::mutex load_mu;
int load_state = 0;               /* 0 not tried, 1 loaded, -1 failed */
char load_msg[512];

int load_cudnn() {
  std::lock_guard<std::mutex> g(load_mu);
  if (load_state) return load_state;
  const char *env = getenv("PPSRT_CUDNN_LIB");
  const char *names[] = {env && *env ? env : "libcudnn.so.9", "libcudnn.so"};
  std::string errs;
  for (const char *n : names) {
    void *h = dlopen(n, RTLD_NOW | RTLD_LOCAL);
    if (h) {
      fe::cudnn_dlhandle = h;
      break;
    }
    const char *e = dlerror();
    errs += std::string(errs.empty() ? "" : "; ") + (e ? e : n);
    if (env && *env) break;   /* an explicit library is the only one tried */
  }
  /* The frontend opens libcudart by name (.so.12 first) for its few runtime calls: make
   * it the very library this process already uses, so there is one CUDA runtime. */
  Dl_info di;
  if (!getenv("CUDNN_FRONTEND_CUDART_LIB_NAME") && dladdr((void *)&cudaRuntimeGetVersion, &di) && di.dli_fname &&
      strstr(di.dli_fname, "libcudart"))
    setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", di.dli_fname, 0);
  if (!fe::cudnn_dlhandle) {
    snprintf(load_msg, sizeof load_msg, "cannot load cuDNN (%s)", errs.c_str());
    return load_state = -1;
  }
  try {
    size_t v = fe::detail::get_backend_version();
    if (v < 90000) {
      snprintf(load_msg, sizeof load_msg, "cuDNN %zu.%zu is too old: fused attention needs cuDNN 9", v / 10000,
               v / 100 % 100);
      return load_state = -1;
    }
  } catch (std::exception &e) {
    snprintf(load_msg, sizeof load_msg, "cuDNN: %s", e.what());
    return load_state = -1;
  }
  return load_state = 1;
}

void put(char *msg, size_t n, const char *fmt, const std::string &s) {
  if (msg && n) snprintf(msg, n, fmt, s.c_str());
}

/* What distinguishes one plan from another. */
typedef std::tuple<int, int, int, int, int, int, int, int, int, int, int, int> Key;

struct Plan {
  std::shared_ptr<fe::graph::Graph> g;   /* null: cuDNN refused the shape (why), asked once */
  int64_t ws;
  std::string why;
};

enum { UQ = 1, UK, UV, UO, ULSE, UDO, UDQ, UDK, UDV };

}  // namespace

struct ppsrt_cudnn {
  cudnnHandle_t h[PPSRT_CUDNN_SLOTS];
  std::mutex mu;
  std::map<Key, Plan> plans;
};

extern "C" int ppsrt_cudnn_version(void) {
  if (load_cudnn() < 0) return 0;
  try {
    return (int)fe::detail::get_backend_version();
  } catch (...) {
    return 0;
  }
}

extern "C" int ppsrt_cudnn_create(ppsrt_cudnn **out, char *msg, size_t n) {
  *out = nullptr;
  if (load_cudnn() < 0) {
    put(msg, n, "%s", load_msg);
    return -1;
  }
  ppsrt_cudnn *c = new (std::nothrow) ppsrt_cudnn();
  if (!c) {
    put(msg, n, "%s", "cuDNN: out of host memory");
    return -1;
  }
  for (int i = 0; i < PPSRT_CUDNN_SLOTS; i++) c->h[i] = nullptr;
  *out = c;
  return 0;
}

extern "C" void ppsrt_cudnn_destroy(ppsrt_cudnn *c) {
  if (!c) return;
  try {
    c->plans.clear();
    for (int i = 0; i < PPSRT_CUDNN_SLOTS; i++)
      if (c->h[i]) fe::detail::destroy_handle(c->h[i]);
  } catch (...) {
  }
  delete c;
}

static std::shared_ptr<fe::graph::Tensor_attributes> bshd(fe::graph::Graph &g, const char *name, int uid, int64_t b,
                                                          int64_t h, int64_t s, int64_t d, int64_t ld) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({b, h, s, d})
                      .set_stride({s * ld, d, ld, 1}));
}

static void as_bshd(const std::shared_ptr<fe::graph::Tensor_attributes> &t, int uid, int64_t b, int64_t h, int64_t s,
                    int64_t d, int64_t ld) {
  t->set_output(true).set_uid(uid).set_dim({b, h, s, d}).set_stride({s * ld, d, ld, 1});
}

static std::shared_ptr<fe::graph::Graph> build(cudnnHandle_t h, const ppsrt_cudnn_attn_shape *sh, std::string &why) {
  const int64_t b = sh->batch, T = sh->T, Hq = sh->Hq, Hk = sh->Hkv, D = sh->D;
  const float scale = 1.0f / sqrtf((float)D);
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto Q = bshd(*g, "q", UQ, b, Hq, T, D, sh->ldq);
  auto K = bshd(*g, "k", UK, b, Hk, T, D, sh->ldk);
  auto V = bshd(*g, "v", UV, b, Hk, T, D, sh->ldv);
  if (!sh->backward) {
    auto opt = fe::graph::SDPA_attributes()
                   .set_name("pps_attention_fwd")
                   .set_generate_stats(true)
                   .set_causal_mask(true)
                   .set_attn_scale(scale);
    auto [O, S] = g->sdpa(Q, K, V, opt);
    as_bshd(O, UO, b, Hq, T, D, sh->ldo);
    S->set_output(true).set_uid(ULSE).set_data_type(fe::DataType_t::FLOAT).set_dim({b, Hq, T, 1}).set_stride(
        {Hq * T, T, 1, 1});
  } else {
    auto O = bshd(*g, "o", UO, b, Hq, T, D, sh->ldo);
    auto dO = bshd(*g, "do", UDO, b, Hq, T, D, sh->ldo);
    auto S = g->tensor(fe::graph::Tensor_attributes()
                           .set_name("lse")
                           .set_uid(ULSE)
                           .set_data_type(fe::DataType_t::FLOAT)
                           .set_dim({b, Hq, T, 1})
                           .set_stride({Hq * T, T, 1, 1}));
    auto opt = fe::graph::SDPA_backward_attributes()
                   .set_name("pps_attention_bwd")
                   .set_causal_mask(true)
                   .set_attn_scale(scale)
                   .set_deterministic_algorithm(true);
    auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, S, opt);
    as_bshd(dQ, UDQ, b, Hq, T, D, sh->ldd);
    as_bshd(dK, UDK, b, Hk, T, D, sh->ldd);
    as_bshd(dV, UDV, b, Hk, T, D, sh->ldd);
  }
  auto st = g->build(h, {fe::HeurMode_t::A});
  if (st.is_bad()) {
    why = st.get_message();
    return nullptr;
  }
  return g;
}

extern "C" int ppsrt_cudnn_attn_prepare(ppsrt_cudnn *c, int slot, const ppsrt_cudnn_attn_shape *sh, size_t *ws_bytes,
                                        char *msg, size_t n) {
  if (slot < 0 || slot >= PPSRT_CUDNN_SLOTS) {
    put(msg, n, "%s", "cuDNN: bad handle slot");
    return -1;
  }
  Key key(slot, sh->backward, sh->batch, sh->T, sh->Hq, sh->Hkv, sh->D, sh->ldq, sh->ldk, sh->ldv, sh->ldo, sh->ldd);
  try {
    std::lock_guard<std::mutex> lk(c->mu);
    auto it = c->plans.find(key);
    if (it == c->plans.end()) {
      if (!c->h[slot] && fe::detail::create_handle(&c->h[slot]) != CUDNN_STATUS_SUCCESS) {
        c->h[slot] = nullptr;
        put(msg, n, "cuDNN: cudnnCreate failed: %s", fe::detail::get_last_error_string_());
        return -1;
      }
      std::string why;
      auto g = build(c->h[slot], sh, why);
      int64_t ws = 0;
      if (g) {
        auto st = g->get_workspace_size(ws);
        if (st.is_bad()) {
          why = "workspace size: " + st.get_message();
          g = nullptr;
        }
      }
      if (!g) {   /* remembered, so a refused shape costs one graph build, not one per call */
        char shape[160];
        snprintf(shape, sizeof shape, "%s batch %d T %d heads %d/%d D %d: ", sh->backward ? "backward" : "forward",
                 sh->batch, sh->T, sh->Hq, sh->Hkv, sh->D);
        why = shape + why;
      }
      it = c->plans.emplace(key, Plan{g, ws, why}).first;
    }
    if (!it->second.g) {
      put(msg, n, "cuDNN fused attention does not support this shape (%s)", it->second.why);
      return -1;
    }
    *ws_bytes = (size_t)it->second.ws;
    return 0;
  } catch (std::exception &e) {
    put(msg, n, "cuDNN: %s", e.what());
    return -1;
  }
}

extern "C" int ppsrt_cudnn_attn_run(ppsrt_cudnn *c, int slot, cudaStream_t s, const ppsrt_cudnn_attn_shape *sh,
                                    void *ws, const ppsrt_cudnn_attn_ptrs *p, char *msg, size_t n) {
  Key key(slot, sh->backward, sh->batch, sh->T, sh->Hq, sh->Hkv, sh->D, sh->ldq, sh->ldk, sh->ldv, sh->ldo, sh->ldd);
  try {
    std::shared_ptr<fe::graph::Graph> g;
    {
      std::lock_guard<std::mutex> lk(c->mu);
      auto it = c->plans.find(key);
      if (it == c->plans.end() || !it->second.g) {
        put(msg, n, "%s", "cuDNN: attention run without a prepared plan");
        return -1;
      }
      g = it->second.g;
    }
    if (fe::detail::set_stream(c->h[slot], s) != CUDNN_STATUS_SUCCESS) {
      put(msg, n, "cuDNN: cudnnSetStream failed: %s", fe::detail::get_last_error_string_());
      return -1;
    }
    std::unordered_map<int64_t, void *> pack = {{UQ, (void *)p->q}, {UK, (void *)p->k}, {UV, (void *)p->v},
                                                {UO, p->out},        {ULSE, p->lse}};
    if (sh->backward) {
      pack[UDO] = (void *)p->dout;
      pack[UDQ] = p->dq;
      pack[UDK] = p->dk;
      pack[UDV] = p->dv;
    }
    auto st = g->execute(c->h[slot], pack, ws);
    if (st.is_bad()) {
      put(msg, n, "cuDNN: attention execute: %s", st.get_message());
      return -1;
    }
    return 0;
  } catch (std::exception &e) {
    put(msg, n, "cuDNN: %s", e.what());
    return -1;
  }
}
