// ggml-t2p.cpp: the T2P extra buffer type for ggml-cpu (PrismML's llama.cpp fork; weight types
// pq2_0, tq1_0 and tq2_0).
//
// Compiled into ggml-cpu by llama-patch/ggml-t2p.patch when ggml is configured with
// -DGGML_T2P=ON -DGGML_T2P_PATCH_DIR=<t2p>/llama-patch; linked against libt2p (find_package(t2p)).
//
// * Weights: a 2-D pq2_0, tq1_0 or tq2_0 tensor with rows % 4 == 0 and k % 256 == 0 that is the
//   weight (src0) of a MUL_MAT with f32 activations is placed in this buffer by llama's
//   weight-buffer selection (supports_op) and repacked to the T2P row-pair layout in set_tensor
//   (t2p_repack_pq2_0 / t2p_repack_to_t2p; the buffer reports the T2P size through
//   get_alloc_size: the size of pq2_0, 26% more than tq1_0, 3% more than tq2_0). get_tensor
//   hands back the original bytes (t2p_unpack_to_source). Any other tensor or op stays with the
//   CPU backend. --no-repack (use_extra_bufts = false) disables every extra buffer type, this
//   one included.
// * MUL_MAT: src1 is quantized to the activation type ggml uses with that weight type (its
//   vec_dot_type, read from ggml's type traits), so patched and stock see the same activations:
//     q8_0 (pq2_0 in the fork snapshot): through ggml's own quantize_row_q8_0, converted by
//              t2p_q8_0_from_ggml (T2P_Q8_0=t2p: t2p_quantize_q8_0 instead, the rounding of
//              ggml's x86 quantizer);
//     q8_K (tq1_0, tq2_0; pq2_0 in later fork versions): one q8_K column or q8_K x4 tiles,
//              t2p's quantizers (the rounding of ggml's quantize_row_q8_K_ref, which x86 uses).
//   T2P_ACT=q8_0|q8_K in the environment forces one for every weight type.
//   The quantization is split over the threads into the op's work buffer (work_size); barrier;
//   then the rows are cut into 4 chunks per thread of whole groups of 4: thread ith starts with
//   chunk ith and takes the next free one when done (ggml's threadpool chunk counter, as
//   repack.cpp does), running t2p_gemv[_q8_0] (one column) or t2p_gemm[_q8_0] (several) over
//   the chunk's rows. Batched src1 (ne12, ne13 > 1) is broadcast against the 2-D weight.
// * T2P_VERIFY=1 in the environment: every MUL_MAT is recomputed with the scalar oracle
//   (t2p_gemv/gemm[_q8_0]_reference) on the same quantized activations and the largest absolute
//   difference is logged (it must be exactly 0); with ggml's q8_0 quantizer, t2p_quantize_q8_0 is
//   also run on the same floats and the quads that differ are counted.

#include "ggml-backend-impl.h"
#include "ggml-backend.h"
#include "ggml-cpu-impl.h"
#include "ggml-cpu.h"
#include "ggml-impl.h"
#include "traits.h"

#include "t2p.h"
#include "t2p-mm.h"

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

ggml_backend_buffer_type_t ggml_backend_cpu_t2p_buffer_type(void);

namespace ggml::cpu::t2p {

static bool verify_enabled() {
    static const bool on = [] {
        const char * v = std::getenv("T2P_VERIFY");
        return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
    }();
    return on;
}

// Process-wide counters; the T2P_VERIFY summary is printed when the library is unloaded.
struct stats {
    std::atomic<uint64_t> tensors{ 0 };
    std::atomic<uint64_t> bytes{ 0 };
    std::atomic<uint64_t> ops{ 0 };
    std::atomic<uint64_t> outputs_differ{ 0 };
    std::atomic<uint64_t> quads_checked{ 0 };  // q8_0: ggml's quantizer vs t2p_quantize_q8_0
    std::atomic<uint64_t> quads_differ{ 0 };
    std::atomic<uint32_t> max_diff_bits{ 0 };  // non-negative floats order like their bits
    uint64_t              logged_ops  = 0;     // thread 0 only
    uint64_t              logged_diff = 0;     // thread 0 only

    float max_diff() const {
        uint32_t b = max_diff_bits.load();
        float    f;
        std::memcpy(&f, &b, sizeof f);
        return f;
    }

    void add_diff(float d, size_t n) {
        uint32_t b;
        std::memcpy(&b, &d, sizeof b);
        uint32_t cur = max_diff_bits.load();
        while (b > cur && !max_diff_bits.compare_exchange_weak(cur, b)) {
        }
        outputs_differ += n;
    }

    ~stats() {
        if (verify_enabled() && ops.load() > 0) {
            // ggml's logger may already be gone at exit: plain stderr.
            std::fprintf(stderr, "t2p: T2P_VERIFY summary: %" PRIu64 " MUL_MATs checked against the scalar reference, "
                                 "largest |T2P - reference| = %.9g, %" PRIu64 " outputs differ\n",
                         ops.load(), (double) max_diff(), outputs_differ.load());
            if (quads_checked.load() > 0) {
                std::fprintf(stderr, "t2p: T2P_VERIFY summary: q8_0 activations: %" PRIu64 " quads of ggml's "
                                     "quantize_row_q8_0 compared with t2p_quantize_q8_0, %" PRIu64 " differ\n",
                             quads_checked.load(), quads_differ.load());
            }
        }
    }
};

static stats g_stats;

// T2P_TYPE_* of a weight type the buffer type takes, 0 for any other.
static uint32_t source_type(ggml_type type) {
    switch (type) {
        case GGML_TYPE_PQ2_0: return T2P_TYPE_PQ2_0;
        case GGML_TYPE_TQ1_0: return T2P_TYPE_TQ1_0;
        case GGML_TYPE_TQ2_0: return T2P_TYPE_TQ2_0;
        default:              return 0;
    }
}

static bool act_for(ggml_type type, t2p_mm_act & act);

// Whether `t` can live in the T2P buffer: 2-D contiguous pq2_0 / tq1_0 / tq2_0, rows % 4 == 0,
// k % 256 == 0, and an activation type the T2P kernels have.
static bool weight_ok(const ggml_tensor * t) {
    t2p_mm_act act;
    return source_type(t->type) != 0 && act_for(t->type, act) && t->ne[2] == 1 && t->ne[3] == 1 && t->ne[1] % 4 == 0 &&
           t->ne[0] % 256 == 0 && t->ne[0] > 0 && t->ne[1] > 0 && ggml_is_contiguous(t);
}

// Bytes of `t` in the T2P layout (weight_ok tensors only): the size of pq2_0.
static size_t t2p_bytes(const ggml_tensor * t) {
    size_t n = 0;
    return t2p_repack_size((size_t) t->ne[1], (size_t) t->ne[0], &n) == T2P_STATUS_OK ? n : 0;
}

// The activation type of MUL_MATs with weights of `type`: the one ggml itself uses with that
// type (its vec_dot_type: q8_0 for pq2_0 in the fork snapshot, q8_K in later fork versions and for
// tq1_0 / tq2_0), unless T2P_ACT=q8_0|q8_K in the environment forces one. false: neither.
static bool act_for(ggml_type type, t2p_mm_act & act) {
    static const int forced = [] {
        const char * v = std::getenv("T2P_ACT");
        if (v == nullptr || v[0] == '\0') {
            return -1;
        }
        if (std::strcmp(v, "q8_0") == 0) {
            return (int) T2P_MM_Q8_0;
        }
        if (std::strcmp(v, "q8_K") == 0) {
            return (int) T2P_MM_Q8_K;
        }
        GGML_LOG_WARN("t2p: ignoring T2P_ACT=%s (expected q8_0 or q8_K)\n", v);
        return -1;
    }();
    if (forced >= 0) {
        act = (t2p_mm_act) forced;
        return true;
    }
    switch (ggml_get_type_traits_cpu(type)->vec_dot_type) {
        case GGML_TYPE_Q8_0: act = T2P_MM_Q8_0; return true;
        case GGML_TYPE_Q8_K: act = T2P_MM_Q8_K; return true;
        default:             return false;
    }
}

static const char * act_name(t2p_mm_act act) {
    return act == T2P_MM_Q8_0 ? "q8_0" : "q8_K";
}

// ggml's quantize_row_q8_0 (what stock pq2_0 MUL_MATs use), or nullptr with T2P_Q8_0=t2p
// (t2p_quantize_q8_0: the rounding of ggml's x86 quantizer, on every platform).
static t2p_mm_from_float q8_0_quantizer() {
    static const t2p_mm_from_float f = []() -> t2p_mm_from_float {
        const char * v = std::getenv("T2P_Q8_0");
        if (v != nullptr && std::strcmp(v, "t2p") == 0) {
            return nullptr;
        }
        return ggml_get_type_traits_cpu(GGML_TYPE_Q8_0)->from_float;
    }();
    return f;
}

// The t2p_mm description of a MUL_MAT whose src0 is in the T2P buffer; false if not servable.
static bool describe(const ggml_tensor * op, t2p_mm & m) {
    const ggml_tensor * src0 = op->src[0];
    const ggml_tensor * src1 = op->src[1];
    if (op->op != GGML_OP_MUL_MAT || src0 == nullptr || src1 == nullptr || !weight_ok(src0) ||
        src1->type != GGML_TYPE_F32 || op->type != GGML_TYPE_F32 || src1->nb[0] != sizeof(float) ||
        op->nb[0] != sizeof(float) || op->ne[0] != src0->ne[1] || src1->ne[0] != src0->ne[0] ||
        op->ne[1] != src1->ne[1] || op->ne[2] != src1->ne[2] || op->ne[3] != src1->ne[3]) {
        return false;
    }
    t2p_mm_act act;
    if (!act_for(src0->type, act) ||
        t2p_mm_init(&m, act, src0->data, t2p_bytes(src0), (size_t) src0->ne[1], (size_t) src0->ne[0],
                    src1->data, (size_t) src1->ne[1], (size_t) src1->ne[2], (size_t) src1->ne[3], src1->nb[1],
                    src1->nb[2], src1->nb[3], op->data, op->nb[1], op->nb[2], op->nb[3]) != T2P_STATUS_OK) {
        return false;
    }
    if (m.act == T2P_MM_Q8_0) {
        m.q8_0_from_float = q8_0_quantizer();
    }
    return true;
}

static void check(T2pStatus s, const char * what, const ggml_tensor * op) {
    if (s != T2P_STATUS_OK) {
        GGML_ABORT("t2p: %s failed for %s: %s", what, op->name, t2p_status_string(s));
    }
}

class tensor_traits : public ggml::cpu::tensor_traits {
    bool work_size(int /* n_threads */, const struct ggml_tensor * op, size_t & size) override {
        t2p_mm m;
        if (!describe(op, m)) {
            return false;
        }
        size = t2p_mm_work_size(&m);
        return true;
    }

    bool compute_forward(struct ggml_compute_params * params, struct ggml_tensor * op) override {
        if (op->op != GGML_OP_MUL_MAT) {
            return false;
        }
        t2p_mm m;
        if (!describe(op, m)) {
            // The weight is in the T2P layout: the CPU backend cannot read it.
            GGML_ABORT("t2p: MUL_MAT %s has a shape the T2P buffer type does not serve", op->name);
        }
        const int ith = params->ith;
        const int nth = params->nth;
        if (params->wsize < t2p_mm_work_size(&m)) {
            GGML_ABORT("t2p: work buffer too small for %s (%zu < %zu)", op->name, params->wsize,
                       t2p_mm_work_size(&m));
        }

        // Row chunks: 4 per thread (1 per thread on NUMA, as ggml does), whole groups of 4 rows.
        const int nchunk = ggml_is_numa() ? std::min(nth, (int) (m.rows / 4)) : (int) t2p_mm_chunk_count(m.rows, nth);
        if (ith == 0) {
            // every thread starts with chunk ith, so the first free one is nth
            ggml_threadpool_chunk_set(params->threadpool, nth);
        }
        check(t2p_mm_quantize(&m, params->wdata, params->wsize, ith, nth), "quantize", op);
        ggml_barrier(params->threadpool);

        const bool verify = verify_enabled();
        float      max_abs = 0.0f;
        size_t     n_diff  = 0;
        for (int chunk = ith; chunk < nchunk; chunk = ggml_threadpool_chunk_add(params->threadpool, 1)) {
            size_t b, e;
            t2p_mm_chunk_rows(m.rows, (size_t) chunk, (size_t) nchunk, &b, &e);
            check(t2p_mm_compute(&m, params->wdata, b, e), m.ncols == 1 ? "t2p_gemv" : "t2p_gemm", op);
            if (verify) {
                verify_rows(op, m, params->wdata, b, e, max_abs, n_diff);
            }
        }
        if (verify) {
            size_t quads = 0, quads_diff = 0;
            check(t2p_mm_quantize_check(&m, params->wdata, ith, nth, &quads, &quads_diff), "quantizer check", op);
            if (quads > 0) {
                g_stats.quads_checked += quads;
                g_stats.quads_differ += quads_diff;
            }
            if (quads_diff > 0) {
                GGML_LOG_ERROR("t2p: T2P_VERIFY: %s: %zu of %zu q8_0 quads of ggml's quantizer differ from "
                               "t2p_quantize_q8_0\n", op->name, quads_diff, quads);
            }
            report(params, op, m, max_abs, n_diff);
        }
        return true;
    }

    static void verify_rows(const ggml_tensor * op, const t2p_mm & m, const void * wdata, size_t b, size_t e,
                            float & max_abs, size_t & n_diff) {
        static thread_local std::vector<float> scratch;
        scratch.resize(t2p_mm_verify_scratch(&m));
        float  mx = 0.0f;
        size_t nd = 0;
        check(t2p_mm_verify(&m, wdata, b, e, scratch.data(), scratch.size(), &mx, &nd), "reference", op);
        max_abs = std::max(max_abs, mx);
        n_diff += nd;
    }

    static void report(struct ggml_compute_params * params, const ggml_tensor * op, const t2p_mm & m, float max_abs,
                       size_t n_diff) {
        if (n_diff > 0) {
            g_stats.add_diff(max_abs, n_diff);
            GGML_LOG_ERROR("t2p: T2P_VERIFY: %s (%s x %s): %zu outputs differ from the reference, max |diff| %.9g\n",
                           op->name, op->src[0]->name, op->src[1]->name, n_diff, (double) max_abs);
        }
        ggml_barrier(params->threadpool);
        if (params->ith == 0) {
            const uint64_t n = ++g_stats.ops;
            const uint64_t d = g_stats.outputs_differ.load();
            if ((n & (n - 1)) == 0 || d != g_stats.logged_diff) {
                GGML_LOG_INFO("t2p: T2P_VERIFY: %" PRIu64 " MUL_MATs checked (last: %s, %s, %zu x %zu x %zu cols), "
                              "largest |T2P - reference| = %.9g, %" PRIu64 " outputs differ\n",
                              n, op->name, act_name(m.act), m.rows, m.k,
                              m.ncols * m.ne2 * m.ne3, (double) g_stats.max_diff(), d);
                g_stats.logged_ops  = n;
                g_stats.logged_diff = d;
            }
        }
    }
};

static tensor_traits g_traits;

static void buffer_set_tensor(ggml_backend_buffer_t buffer, struct ggml_tensor * tensor, const void * data,
                              size_t offset, size_t size) {
    GGML_UNUSED(buffer);
    const size_t nbytes = ggml_nbytes(tensor);
    if (offset == 0 && size == nbytes && weight_ok(tensor)) {
        const uint32_t type = source_type(tensor->type);
        const size_t   tb   = t2p_bytes(tensor);
        const size_t   rows = (size_t) tensor->ne[1], k = (size_t) tensor->ne[0];
        const T2pStatus s   = type == T2P_TYPE_PQ2_0 ? t2p_repack_pq2_0(data, size, tensor->data, tb, rows, k)
                                                     : t2p_repack_to_t2p(type, data, size, tensor->data, tb, rows, k);
        if (s == T2P_STATUS_OK) {
            tensor->extra = &g_traits;
            t2p_mm_act     act;
            const uint64_t n = ++g_stats.tensors;
            g_stats.bytes += tb;
            if (n == 1) {
                GGML_LOG_INFO("t2p: placing ternary weights in the T2P buffer (repacked to the row-pair layout, "
                              "libt2p %s, %s kernels%s%s), first: %s (%s) [%" PRId64 " x %" PRId64 "]\n",
                              t2p_version(), t2p_isa_name(t2p_active_isa()),
                              q8_0_quantizer() == nullptr ? ", q8_0 by t2p_quantize_q8_0" : "",
                              verify_enabled() ? ", T2P_VERIFY on" : "", tensor->name, ggml_type_name(tensor->type),
                              tensor->ne[1], tensor->ne[0]);
            }
            GGML_LOG_DEBUG("t2p: %s (%s, %s activations) [%" PRId64 " x %" PRId64 "] repacked to T2P "
                           "(%" PRIu64 " tensors, %.2f MiB so far)\n",
                           tensor->name, ggml_type_name(tensor->type), act_for(tensor->type, act) ? act_name(act) : "?",
                           tensor->ne[1], tensor->ne[0], n, g_stats.bytes.load() / 1048576.0);
            return;
        }
        GGML_LOG_WARN("t2p: %s not repacked (%s), left in %s layout for the CPU backend\n", tensor->name,
                      t2p_status_string(s), ggml_type_name(tensor->type));
    }
    if (tensor->extra == &g_traits) {
        GGML_ABORT("t2p: partial write to the repacked tensor %s", tensor->name);
    }
    std::memcpy((char *) tensor->data + offset, data, size);
}

static void buffer_get_tensor(ggml_backend_buffer_t buffer, const struct ggml_tensor * tensor, void * data,
                              size_t offset, size_t size) {
    GGML_UNUSED(buffer);
    if (tensor->extra != &g_traits) {
        std::memcpy(data, (const char *) tensor->data + offset, size);
        return;
    }
    // Hand back the original bytes (pq2_0 / tq2_0 exactly; tq1_0 in ggml's canonical base-3 form,
    // which is what ggml's quantizer writes).
    const size_t      nbytes = ggml_nbytes(tensor);
    std::vector<char> tmp(nbytes);
    const T2pStatus   s = t2p_unpack_to_source(source_type(tensor->type), tensor->data, t2p_bytes(tensor), tmp.data(),
                                               nbytes, (size_t) tensor->ne[1], (size_t) tensor->ne[0]);
    if (s != T2P_STATUS_OK) {
        GGML_ABORT("t2p: unpacking %s failed: %s", tensor->name, t2p_status_string(s));
    }
    std::memcpy(data, tmp.data() + offset, size);
}

static const char * buffer_type_get_name(ggml_backend_buffer_type_t buft) {
    GGML_UNUSED(buft);
    return "CPU_T2P";
}

static ggml_backend_buffer_t buffer_type_alloc_buffer(ggml_backend_buffer_type_t buft, size_t size) {
    ggml_backend_buffer_t buffer = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), size);
    if (buffer == nullptr) {
        return nullptr;
    }
    buffer->buft              = buft;
    buffer->iface.set_tensor  = buffer_set_tensor;
    buffer->iface.get_tensor  = buffer_get_tensor;
    buffer->iface.cpy_tensor  = nullptr;
    return buffer;
}

static size_t buffer_type_get_alignment(ggml_backend_buffer_type_t buft) {
    GGML_UNUSED(buft);
    return TENSOR_ALIGNMENT;
}

// The T2P layout has the size of pq2_0: more than tq1_0 / tq2_0 (one fp16 scale per 128 weights
// and row instead of per 256, and 2 bits a weight instead of 1.6 for tq1_0).
static size_t buffer_type_get_alloc_size(ggml_backend_buffer_type_t buft, const struct ggml_tensor * tensor) {
    GGML_UNUSED(buft);
    const size_t nbytes = ggml_nbytes(tensor);
    return weight_ok(tensor) ? std::max(nbytes, t2p_bytes(tensor)) : nbytes;
}

class extra_buffer_type : public ggml::cpu::extra_buffer_type {
    bool supports_op(ggml_backend_dev_t, const struct ggml_tensor * op) override {
        if (op->op != GGML_OP_MUL_MAT || op->src[0] == nullptr || op->src[0]->buffer == nullptr ||
            op->src[0]->buffer->buft != ggml_backend_cpu_t2p_buffer_type()) {
            return false;
        }
        const ggml_tensor * src1 = op->src[1];
        if (src1 == nullptr || (src1->buffer && !ggml_backend_buft_is_host(src1->buffer->buft))) {
            return false;
        }
        t2p_mm m;
        return describe(op, m);
    }

    ggml::cpu::tensor_traits * get_tensor_traits(const struct ggml_tensor * op) override {
        if (op->op == GGML_OP_MUL_MAT && op->src[0] && op->src[0]->buffer &&
            op->src[0]->buffer->buft == ggml_backend_cpu_t2p_buffer_type() && op->src[0]->extra == &g_traits) {
            return &g_traits;
        }
        return nullptr;
    }
};

}  // namespace ggml::cpu::t2p

ggml_backend_buffer_type_t ggml_backend_cpu_t2p_buffer_type(void) {
    static struct ggml_backend_buffer_type buft = {
        /* .iface    = */ {
            /* .get_name         = */ ggml::cpu::t2p::buffer_type_get_name,
            /* .alloc_buffer     = */ ggml::cpu::t2p::buffer_type_alloc_buffer,
            /* .get_alignment    = */ ggml::cpu::t2p::buffer_type_get_alignment,
            /* .get_max_size     = */ nullptr,  // SIZE_MAX
            /* .get_alloc_size   = */ ggml::cpu::t2p::buffer_type_get_alloc_size,
            /* .is_host          = */ nullptr,  // not host: weights arrive through set_tensor
        },
        /* .device   = */ ggml_backend_reg_dev_get(ggml_backend_cpu_reg(), 0),
        /* .context  = */ new ggml::cpu::t2p::extra_buffer_type(),
    };
    return &buft;
}
