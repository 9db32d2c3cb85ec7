#include "worker/sparse/ctr_input.h"

#include <algorithm>

#include "shared/util/error.h"

namespace pstrain {

void CtrInput::request(const uint64_t* ids, const uint32_t* counts, size_t n, uint64_t version) {
  PSTRAIN_CHECK(source_ != nullptr);
  PSTRAIN_CHECK(!requested_);
  embedding_.prepare(ids, counts, n);
  const size_t shards = static_cast<size_t>(options_.num_ps);
  std::vector<const std::vector<SparseSection>*> requests(shards);
  for (size_t s = 0; s < shards; ++s) requests[s] = &embedding_.pull(static_cast<int>(s));
  ticket_ = source_->request_rows(version, requests);
  requested_ = true;
  received_ = false;
}

const float* CtrInput::input(const float* dense, size_t first, size_t n) {
  x_.resize(n * input_dim());
  input(dense, first, n, x_.data());
  return x_.data();
}

void CtrInput::input(const float* dense, size_t first, size_t n, float* out) {
  if (!received_) {
    PSTRAIN_CHECK(requested_);
    requested_ = false;
    const size_t shards = static_cast<size_t>(options_.num_ps);
    std::vector<std::vector<SparseSection>> rows = source_->receive_rows(ticket_);
    for (size_t s = 0; s < shards; ++s) {
      std::string error;
      if (!embedding_.set_rows(static_cast<int>(s), std::move(rows[s]), &error)) {
        throw Error("ps" + std::to_string(s) + "'s embedding rows: " + error);
      }
    }
    received_ = true;
  }
  embedding_.gather(dense, first, n, out);
}

const float* CtrInput::input(const float* dense, size_t n) {
  PSTRAIN_CHECK_EQ(n, embedding_.batch());
  return input(dense, 0, n);
}

void CtrInput::discard() {
  PSTRAIN_CHECK(requested_);
  requested_ = false;
  source_->receive_rows(ticket_);
}

void CtrInput::add_gradient(size_t first, size_t n, const float* dx) {
  PSTRAIN_CHECK(received_);
  PSTRAIN_CHECK(first <= embedding_.batch() && n <= embedding_.batch() - first);
  const size_t width = input_dim();
  dx_.resize(embedding_.batch() * width);
  std::copy(dx, dx + n * width, dx_.begin() + static_cast<std::ptrdiff_t>(first * width));
}

void CtrInput::push(uint64_t step, uint64_t samples) {
  PSTRAIN_CHECK(source_ != nullptr && received_);
  PSTRAIN_CHECK_EQ(dx_.size(), embedding_.batch() * input_dim());
  const size_t shards = static_cast<size_t>(options_.num_ps);
  std::vector<std::vector<SparseSection>> sections(shards);
  for (size_t s = 0; s < shards; ++s) sections[s] = embedding_.gradients(static_cast<int>(s), dx_.data());
  source_->push_rows(step, samples, sections);
}

}  // namespace pstrain
