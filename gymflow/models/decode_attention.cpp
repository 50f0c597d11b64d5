// One query per row against its KV cache: the attention of a decoding step (gymflow/models/decode_attention.py).
// Each (row, head) streams its keys and values once, with a running softmax, on PyTorch's own thread pool.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

template <int64_t FIXED_DIM>  // the head size known at compile time (0: read at run time), so loops vectorize
static void rows(const float* q, const float* k, const float* v, const bool* mask, float* out, int64_t heads,
                 int64_t dim_, int64_t kv_heads, int64_t context, const int64_t* ks, const int64_t* vs,
                 float scale, int64_t begin, int64_t end) {
  const int64_t dim = FIXED_DIM > 0 ? FIXED_DIM : dim_;
  const int64_t group = heads / kv_heads;
  std::vector<float> query(dim), acc(dim);
  for (int64_t rh = begin; rh < end; ++rh) {
    const int64_t row = rh / heads, kv = (rh % heads) / group;
    for (int64_t d = 0; d < dim; ++d) {
      query[d] = q[rh * dim + d] * scale;
      acc[d] = 0.f;
    }
    const float* keys = k + row * ks[0] + kv * ks[1];
    const float* values = v + row * vs[0] + kv * vs[1];
    const bool* kept = mask + row * context;
    float top = -INFINITY, total = 0.f;
    for (int64_t t = 0; t < context; ++t) {
      if (!kept[t]) continue;
      const float* key = keys + t * ks[2];
      float score = 0.f;
      for (int64_t d = 0; d < dim; ++d) score += query[d] * key[d];
      if (score > top) {  // a new maximum: rescale what was summed so far
        const float shrink = std::exp(top - score);
        total *= shrink;
        for (int64_t d = 0; d < dim; ++d) acc[d] *= shrink;
        top = score;
      }
      const float weight = std::exp(score - top);
      total += weight;
      const float* value = values + t * vs[2];
      for (int64_t d = 0; d < dim; ++d) acc[d] += weight * value[d];
    }
    const float inv = total > 0.f ? 1.f / total : 0.f;  // a row with nothing to attend to gets zeros
    for (int64_t d = 0; d < dim; ++d) out[rh * dim + d] = acc[d] * inv;
  }
}

// q: (batch, heads, dim) contiguous; k, v: (batch, kv_heads, context, dim), last dimension contiguous (a view of
// a longer buffer is fine); mask: (batch, context) bool, true where a position is attended to.
torch::Tensor attend(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor mask, double scale) {
  TORCH_CHECK(q.dtype() == torch::kFloat32 && k.dtype() == torch::kFloat32 && v.dtype() == torch::kFloat32);
  TORCH_CHECK(q.is_contiguous() && mask.is_contiguous() && mask.dtype() == torch::kBool);
  TORCH_CHECK(k.stride(3) == 1 && v.stride(3) == 1 && k.sizes() == v.sizes());
  const int64_t batch = q.size(0), heads = q.size(1), dim = q.size(2), kv_heads = k.size(1), context = k.size(2);
  TORCH_CHECK(heads % kv_heads == 0 && k.size(0) == batch && k.size(3) == dim);
  TORCH_CHECK(mask.size(0) == batch && mask.size(1) == context);
  auto out = torch::empty({batch, heads, dim}, q.options());
  const int64_t ks[3] = {k.stride(0), k.stride(1), k.stride(2)}, vs[3] = {v.stride(0), v.stride(1), v.stride(2)};
  const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
  const bool* mp = mask.data_ptr<bool>();
  float* op = out.data_ptr<float>();
  auto run = dim == 32 ? rows<32> : dim == 64 ? rows<64> : dim == 128 ? rows<128> : rows<0>;
  at::parallel_for(0, batch * heads, 1, [&](int64_t begin, int64_t end) {
    run(qp, kp, vp, mp, op, heads, dim, kv_heads, context, ks, vs, static_cast<float>(scale), begin, end);
  });
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("attend", &attend, "one decoding step's attention"); }
