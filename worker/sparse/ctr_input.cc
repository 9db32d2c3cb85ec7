#include "worker/sparse/ctr_input.h"

#include "shared/util/error.h"

namespace pstrain {

void CtrInput::request(const uint64_t* ids, size_t n, uint64_t version) {
  PSTRAIN_CHECK(source_ != nullptr);
  PSTRAIN_CHECK(!requested_);
  embedding_.prepare(ids, n);
  const size_t shards = static_cast<size_t>(options_.num_ps);
  std::vector<const std::vector<SparseSection>*> requests(shards);
  for (size_t s = 0; s < shards; ++s) requests[s] = &embedding_.pull(static_cast<int>(s));
  ticket_ = source_->request_rows(version, requests);
  requested_ = true;
}

const float* CtrInput::input(const float* dense, size_t n) {
  PSTRAIN_CHECK(requested_);
  PSTRAIN_CHECK_EQ(n, embedding_.batch());
  requested_ = false;
  const size_t shards = static_cast<size_t>(options_.num_ps);
  std::vector<std::vector<SparseSection>> rows = source_->receive_rows(ticket_);
  for (size_t s = 0; s < shards; ++s) {
    std::string error;
    if (!embedding_.set_rows(static_cast<int>(s), std::move(rows[s]), &error)) {
      throw Error("ps" + std::to_string(s) + "'s embedding rows: " + error);
    }
  }
  x_.resize(n * input_dim());
  embedding_.gather(dense, x_.data());
  return x_.data();
}

void CtrInput::push(uint64_t step, uint64_t samples, const float* dx) {
  PSTRAIN_CHECK(source_ != nullptr);
  const size_t shards = static_cast<size_t>(options_.num_ps);
  std::vector<std::vector<SparseSection>> sections(shards);
  for (size_t s = 0; s < shards; ++s) sections[s] = embedding_.gradients(static_cast<int>(s), dx);
  source_->push_rows(step, samples, sections);
}

}  // namespace pstrain
