// ggml-t2p.cpp: the T2P extra buffer type for ggml-cpu (PrismML's llama.cpp fork; weight types
// pq2_0, tq1_0, tq2_0 and mainline's group-64 q2_0).
//
// Compiled into ggml-cpu by llama-patch/ggml-t2p.patch when ggml is configured with
// -DGGML_T2P=ON -DGGML_T2P_PREFIX=<absolute prefix of t2p's build/install.sh>, which installs this
// file and t2p-mm.h; linked against libt2p.a (find_package(t2p), its symbols not exported).
//
// * Weights: a 2-D contiguous pq2_0, tq1_0, tq2_0 or q2_0 tensor (any row count, k a multiple of
//   128, and of 256 for tq*; q2_0 goes to the group-64 T2P layout, a scale per 64 weights, and
//   always takes q8_0, its vec_dot_type) that is the weight (src0) of a MUL_MAT with f32
//   activations is placed in this buffer by llama's weight-buffer selection (supports_op) and
//   repacked to the T2P row-pair layout in set_tensor (t2p_repack; the buffer reports the T2P
//   size through get_alloc_size: the size of pq2_0, plus the padding rows of a last group of
//   fewer than 4). get_tensor hands back the original bytes (t2p_unpack). Any other tensor or op
//   stays with the CPU backend. --no-repack (use_extra_bufts = false) disables every extra
//   buffer type, this one included.
// * MUL_MAT: one t2p plan (t2p-mm.h). src1 is quantized to the activation type ggml uses with
//   that weight type (its vec_dot_type, read from ggml's type traits): q8_0 through ggml's own
//   quantize_row_q8_0 (T2P_Q8_0=t2p: t2p's quantizer, the rounding of ggml's x86 one), q8_K
//   through t2p's (the rounding of ggml's quantize_row_q8_K_ref); a k that is not a multiple of
//   256 always gets q8_0. T2P_ACT=q8_0|q8_K forces one for every weight type. Every thread
//   quantizes its share into the op's work buffer (work_size); barrier; then each thread starts
//   with row chunk ith and takes the next free one from ggml's chunk counter, as repack.cpp does.
// * T2P_VERIFY=1 in the environment: every chunk is computed again with the scalar oracle on the
//   same activations and compared bit for bit (the count of differing outputs must be 0); with
//   ggml's q8_0 quantizer, thread 0 also quantizes src1 with t2p's and counts the bytes that differ.

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
    std::atomic<uint64_t> outputs{ 0 };
    std::atomic<uint64_t> outputs_differ{ 0 };
    std::atomic<uint64_t> q8_0_bytes{ 0 };  // ggml's quantize_row_q8_0 vs t2p's, work-buffer bytes
    std::atomic<uint64_t> q8_0_differ{ 0 };

    ~stats() {
        if (verify_enabled() && ops.load() > 0) {
            // ggml's logger may already be gone at exit: plain stderr.
            std::fprintf(stderr, "t2p: T2P_VERIFY summary: %" PRIu64 " MUL_MATs, %" PRIu64 " outputs checked against "
                                 "the scalar oracle, %" PRIu64 " differ\n",
                         ops.load(), outputs.load(), outputs_differ.load());
            if (q8_0_bytes.load() > 0) {
                std::fprintf(stderr, "t2p: T2P_VERIFY summary: q8_0 activations: %" PRIu64 " bytes of ggml's "
                                     "quantize_row_q8_0 compared with t2p's quantizer, %" PRIu64 " differ\n",
                             q8_0_bytes.load(), q8_0_differ.load());
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
        // mainline's Q2_0: 64 weights in 18 bytes, repacked to group-64 T2P blocks
        case GGML_TYPE_Q2_0:  return T2P_TYPE_Q2_0;
        default:              return 0;
    }
}

// The T2P_ACT_* of MUL_MATs with weights of `type`: the one ggml itself uses with that type (its
// vec_dot_type: q8_0 for pq2_0 in the fork snapshot, q8_K in later fork versions and for tq1_0 /
// tq2_0), unless T2P_ACT=q8_0|q8_K in the environment forces one. false: neither.
static bool act_for(ggml_type type, uint32_t & act) {
    static const int forced = [] {
        const char * v = std::getenv("T2P_ACT");
        if (v == nullptr || v[0] == '\0') {
            return -1;
        }
        if (std::strcmp(v, "q8_0") == 0) {
            return (int) T2P_ACT_Q8_0;
        }
        if (std::strcmp(v, "q8_K") == 0) {
            return (int) T2P_ACT_Q8_K;
        }
        GGML_LOG_WARN("t2p: ignoring T2P_ACT=%s (expected q8_0 or q8_K)\n", v);
        return -1;
    }();
    if (forced >= 0) {
        act = (uint32_t) forced;
        return true;
    }
    switch (ggml_get_type_traits_cpu(type)->vec_dot_type) {
        case GGML_TYPE_Q8_0: act = T2P_ACT_Q8_0; return true;
        case GGML_TYPE_Q8_K: act = T2P_ACT_Q8_K; return true;
        default:             return false;
    }
}

static const char * act_name(uint32_t act) {
    return act == T2P_ACT_Q8_0 ? "q8_0" : "q8_K";
}

// Bytes of `t` in the T2P layout of its type, 0 if T2P cannot hold its type or shape.
static size_t t2p_bytes(const ggml_tensor * t) {
    size_t n = 0;
    return source_type(t->type) != 0 &&
                   t2p_repacked_size(source_type(t->type), (size_t) t->ne[1], (size_t) t->ne[0], &n) == T2P_STATUS_OK ?
               n :
               0;
}

// Whether `t` can live in the T2P buffer: 2-D contiguous pq2_0 / tq1_0 / tq2_0 / q2_0 whose shape T2P
// and the source format hold, and an activation type the T2P kernels have.
static bool weight_ok(const ggml_tensor * t) {
    uint32_t act;
    size_t   n;
    return source_type(t->type) != 0 && act_for(t->type, act) && t->ne[2] == 1 && t->ne[3] == 1 &&
           ggml_is_contiguous(t) && t2p_bytes(t) > 0 &&
           t2p_source_size(source_type(t->type), (size_t) t->ne[1], (size_t) t->ne[0], &n) == T2P_STATUS_OK &&
           n == ggml_nbytes(t);
}

// ggml's quantize_row_q8_0 (what stock pq2_0 MUL_MATs use), or nullptr with T2P_Q8_0=t2p
// (t2p's quantizer: the rounding of ggml's x86 one, on every platform).
static T2pQ8_0FromFloat q8_0_quantizer() {
    static const T2pQ8_0FromFloat f = []() -> T2pQ8_0FromFloat {
        const char * v = std::getenv("T2P_Q8_0");
        if (v != nullptr && std::strcmp(v, "t2p") == 0) {
            return nullptr;
        }
        return ggml_get_type_traits_cpu(GGML_TYPE_Q8_0)->from_float;
    }();
    return f;
}

// The t2p_mm of a MUL_MAT whose src0 is in the T2P buffer; false if not servable. `empty`: src1
// has no columns (a batch that needs no outputs): servable, with nothing to compute.
static bool describe(const ggml_tensor * op, t2p_mm & m, bool & empty) {
    const ggml_tensor * src0 = op->src[0];
    const ggml_tensor * src1 = op->src[1];
    uint32_t            act;
    if (op->op != GGML_OP_MUL_MAT || src0 == nullptr || src1 == nullptr || !weight_ok(src0) ||
        !act_for(src0->type, act) || src1->type != GGML_TYPE_F32 || op->type != GGML_TYPE_F32 ||
        src1->nb[0] != sizeof(float) || op->nb[0] != sizeof(float) || op->ne[0] != src0->ne[1] ||
        src1->ne[0] != src0->ne[0] || op->ne[1] != src1->ne[1] || op->ne[2] != src1->ne[2] ||
        op->ne[3] != src1->ne[3]) {
        return false;
    }
    empty = ggml_nelements(src1) == 0;
    return empty ||
           t2p_mm_init(&m, source_type(src0->type), act, src0->data, t2p_bytes(src0), (size_t) src0->ne[1],
                       (size_t) src0->ne[0], src1->data, (size_t) src1->ne[1], (size_t) src1->ne[2],
                       (size_t) src1->ne[3], src1->nb[1], src1->nb[2], src1->nb[3], op->data, op->nb[1],
                       op->nb[2], op->nb[3], q8_0_quantizer(), verify_enabled()) == T2P_STATUS_OK;
}

static void check(T2pStatus s, const char * what, const ggml_tensor * op) {
    if (s != T2P_STATUS_OK) {
        GGML_ABORT("t2p: %s failed for %s: %s", what, op->name, t2p_status_string(s));
    }
}

class tensor_traits : public ggml::cpu::tensor_traits {
    bool work_size(int /* n_threads */, const struct ggml_tensor * op, size_t & size) override {
        t2p_mm m;
        bool   empty;
        if (!describe(op, m, empty)) {
            return false;
        }
        size = empty ? 0 : t2p_mm_work_size(&m);
        return true;
    }

    bool compute_forward(struct ggml_compute_params * params, struct ggml_tensor * op) override {
        if (op->op != GGML_OP_MUL_MAT) {
            return false;
        }
        t2p_mm m;
        bool   empty;
        if (!describe(op, m, empty)) {
            // The weight is in the T2P layout: the CPU backend cannot read it.
            GGML_ABORT("t2p: MUL_MAT %s has a shape the T2P buffer type does not serve", op->name);
        }
        if (empty) {
            return true;
        }
        const int ith = params->ith;
        const int nth = params->nth;
        if (params->wsize < t2p_mm_work_size(&m)) {
            GGML_ABORT("t2p: work buffer too small for %s (%zu < %zu)", op->name, params->wsize,
                       t2p_mm_work_size(&m));
        }
        const size_t nchunk = t2p_mm_chunks(&m, nth);
        if (ith == 0) {
            // every thread starts with chunk ith, so the first free one is nth
            ggml_threadpool_chunk_set(params->threadpool, nth);
        }
        check(t2p_mm_quantize(&m, params->wdata, ith, nth), "t2p_plan_quantize", op);
        ggml_barrier(params->threadpool);

        size_t n_diff = 0;
        for (size_t chunk = (size_t) ith; chunk < nchunk;
             chunk = (size_t) ggml_threadpool_chunk_add(params->threadpool, 1)) {
            check(t2p_mm_compute(&m, params->wdata, chunk, nchunk), "t2p_plan_compute", op);
            if (m.verify) {
                size_t d = 0;
                check(t2p_mm_verify(&m, params->wdata, chunk, nchunk, &d), "t2p_plan_compute (oracle)", op);
                n_diff += d;
            }
        }
        if (m.verify) {
            report(params, op, m, n_diff);
        }
        return true;
    }

    // T2P_VERIFY: logs differing outputs; thread 0 also compares ggml's q8_0 quantizer with t2p's.
    static void report(struct ggml_compute_params * params, const ggml_tensor * op, const t2p_mm & m, size_t n_diff) {
        g_stats.outputs_differ += n_diff;
        if (n_diff > 0) {
            GGML_LOG_ERROR("t2p: T2P_VERIFY: %s (%s x %s): %zu outputs differ from the scalar oracle\n", op->name,
                           op->src[0]->name, op->src[1]->name, n_diff);
        }
        if (params->ith != 0) {
            return;
        }
        const uint64_t n = ++g_stats.ops;
        g_stats.outputs += (uint64_t) m.plan.rows * m.plan.ncols * t2p_mm_planes(&m);
        if (m.from_float != nullptr) {
            t2p_mm mine = m;
            mine.from_float = nullptr;
            std::vector<char> work(t2p_mm_planes(&m) * m.plan.work_bytes + 4);
            char * w = work.data() + (4 - (uintptr_t) work.data() % 4) % 4;
            check(t2p_mm_quantize(&mine, w, 0, 1), "t2p_plan_quantize (verify)", op);
            size_t differ = 0;
            for (size_t i = 0; i < t2p_mm_planes(&m) * m.plan.work_bytes; i++) {
                differ += w[i] != ((const char *) params->wdata)[i];
            }
            g_stats.q8_0_bytes += t2p_mm_planes(&m) * m.plan.work_bytes;
            g_stats.q8_0_differ += differ;
        }
        if ((n & (n - 1)) == 0) {
            GGML_LOG_INFO("t2p: T2P_VERIFY: %" PRIu64 " MUL_MATs checked (last: %s, %s, %zu x %zu x %zu cols), "
                          "%" PRIu64 " outputs differ from the scalar oracle\n",
                          n, op->name, act_name(m.plan.act), m.plan.rows, m.plan.k,
                          m.plan.ncols * t2p_mm_planes(&m), g_stats.outputs_differ.load());
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
        const T2pStatus s   = t2p_repack(type, data, size, tensor->data, tb, rows, k);
        if (s == T2P_STATUS_OK) {
            tensor->extra = &g_traits;
            uint32_t       act;
            const uint64_t n = ++g_stats.tensors;
            g_stats.bytes += tb;
            if (n == 1) {
                GGML_LOG_INFO("t2p: placing ternary weights in the T2P buffer (repacked to the row-pair layout, "
                              "libt2p %s, %s kernels%s%s), first: %s (%s) [%" PRId64 " x %" PRId64 "]\n",
                              t2p_version(), t2p_isa_name(t2p_active_isa()),
                              q8_0_quantizer() == nullptr ? ", q8_0 by t2p's quantizer" : "",
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
    const T2pStatus   s = t2p_unpack(source_type(tensor->type), tensor->data, t2p_bytes(tensor), tmp.data(),
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

// The T2P layout has the size of pq2_0 (of q2_0 for its group-64 layout): more than tq1_0 / tq2_0
// (one fp16 scale per 128 weights and row instead of per 256, and 2 bits a weight instead of 1.6
// for tq1_0).
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
        bool   empty;
        if (!describe(op, m, empty)) {
            // A ternary weight in the T2P layout can only be read here: say why not.
            const ggml_tensor * s0 = op->src[0];
            GGML_LOG_DEBUG("t2p: cannot serve MUL_MAT %s: %s [%" PRId64 " x %" PRId64 "] x %s %s [%" PRId64 ", %" PRId64
                          ", %" PRId64 ", %" PRId64 "] nb [%zu, %zu, %zu, %zu]\n",
                          op->name, s0->name, s0->ne[1], s0->ne[0], src1->name, ggml_type_name(src1->type), src1->ne[0],
                          src1->ne[1], src1->ne[2], src1->ne[3], src1->nb[0], src1->nb[1], src1->nb[2], src1->nb[3]);
            return false;
        }
        return true;
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
