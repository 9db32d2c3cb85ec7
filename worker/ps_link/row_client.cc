#include "worker/ps_link/row_client.h"

#include <algorithm>

#include "shared/util/error.h"
#include "shared/util/log.h"

namespace pstrain {
namespace {

// A pull's answer may wait while a shard's barrier waits (WAITING restarts the wait), but at most
// this many --timeout in all, as receive_params does.
constexpr double kPatienceTimeouts = 4;

}  // namespace

// receive_rows' wait: until every shard answered the ticket. Its messages are the client's (an
// attached awaiter); whatever nobody owns comes here, unexpected.
class RowClient::Receive final : public PsChannel::Wait {
 public:
  Receive(RowClient& client, uint64_t ticket)
      : c_(client),
        ticket_(ticket),
        timeout_s_(client.channel_.options().timeout_s),
        start_(Clock::now()),
        give_up_(deadline_after(kPatienceTimeouts * timeout_s_)) {}

  bool owns(const Header&) const override { return false; }
  std::string what() const override { return "embedding rows"; }
  void take(Message& msg, const Header& h) override {
    throw Error("unexpected " + std::string(op_name(h.op)) + " from ps" + std::to_string(msg.shard) +
                " while waiting for embedding rows");
  }
  bool finished() const override { return request().left == 0; }
  Clock::time_point until() const override {
    const auto heard = std::max(start_, request().last_waiting);
    return std::min(
        heard + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_)),
        give_up_);
  }
  void expired() override {
    const RowsRequest& r = request();
    std::string missing, why;
    for (size_t s = 0; s < r.waiting.size(); ++s) {
      if (r.waiting[s]) missing += (missing.empty() ? "ps" : ", ps") + std::to_string(s);
      if (r.waiting[s] && !r.waits[s].empty()) why += "; ps" + std::to_string(s) + " waits for " + r.waits[s];
    }
    throw Error("timed out after " +
                seconds_text(Clock::now() >= give_up_ ? kPatienceTimeouts * timeout_s_ : timeout_s_) +
                " waiting for embedding rows from " + missing + why);
  }

 private:
  const RowsRequest& request() const { return *c_.find(ticket_); }

  const RowClient& c_;
  const uint64_t ticket_;
  const double timeout_s_;
  const Clock::time_point start_, give_up_;
};

RowClient::RowClient(PsChannel& channel) : channel_(channel) { channel_.attach(this); }

RowClient::~RowClient() { channel_.detach(this); }

std::vector<RowClient::RowsRequest>::iterator RowClient::find(uint64_t ticket) {
  return std::find_if(requests_.begin(), requests_.end(),
                      [&](const RowsRequest& q) { return q.ticket == ticket; });
}

std::vector<RowClient::RowsRequest>::const_iterator RowClient::find(uint64_t ticket) const {
  return std::find_if(requests_.begin(), requests_.end(),
                      [&](const RowsRequest& q) { return q.ticket == ticket; });
}

uint64_t RowClient::request_rows(uint64_t version,
                                 const std::vector<const std::vector<SparseSection>*>& requests) {
  const size_t shards = static_cast<size_t>(channel_.num_shards());
  RowsRequest r;
  r.ticket = channel_.new_request();
  r.waiting.assign(shards, false);
  r.rows.resize(shards);
  r.shards.resize(shards);
  r.waits.resize(shards);
  // Every shard is asked, also one that holds none of the IDs (an empty pull): its answer says
  // that its tables reached the version, which the step's push to it needs in hybrid mode (where
  // no PARAMS of the shard's say so).
  static const std::vector<SparseSection> kNone;
  for (size_t s = 0; s < shards; ++s) {
    const std::vector<SparseSection>& sections = requests[s] != nullptr ? *requests[s] : kNone;
    std::vector<uint32_t> dims;
    for (const SparseSection& section : sections) {
      const auto dim = row_dims_.find(section.table);
      dims.push_back(dim != row_dims_.end() ? dim->second : channel_.options().row_dim);
    }
    const int shard = static_cast<int>(s);
    std::vector<std::string> bodies =
        encode_sparse_parts(Op::kSparsePull, sections, channel_.chunk(shard) * sizeof(float), dims);
    expect_parts(r.shards[s], bodies);
    for (size_t k = 0; k < bodies.size(); ++k) {
      Header h = channel_.request(Op::kSparsePull, version, shard);
      h.request_id = r.ticket;
      h.offset = 0;
      h.length = bodies[k].size() / 4;
      h.part = k;
      h.parts = bodies.size();
      Frame payload(std::move(bodies[k]));
      channel_.send(shard, h, &payload);
    }
    r.waiting[s] = true;
    ++r.left;
  }
  requests_.push_back(std::move(r));
  return requests_.back().ticket;
}

void RowClient::expect_parts(ShardRows& answer, const std::vector<std::string>& bodies) const {
  answer.parts = answer.left = bodies.size();
  answer.answers.resize(bodies.size());
  answer.got.assign(bodies.size(), false);
  for (size_t k = 0; k < bodies.size() && bodies.size() > 1; ++k) {  // what each part asks for
    std::vector<SparseSection> asked;
    std::string error;
    PSTRAIN_CHECK(decode_sparse_body(Op::kSparsePull, bodies[k].data(), bodies[k].size(), &asked, &error));
    answer.asked.emplace_back();
    for (const SparseSection& section : asked)
      answer.asked.back().emplace_back(section.table, section.ids.size());
  }
}

void RowClient::waiting(int shard, const Header& h) {
  const auto r = find(h.request_id);
  r->waits[static_cast<size_t>(shard)] = h.message;
  r->last_waiting = Clock::now();
}

void RowClient::take(Message& msg, const Header& h) {
  const auto r = find(h.request_id);
  const auto s = static_cast<size_t>(msg.shard);
  if (h.op != Op::kSparseRows || !r->waiting[s]) {
    throw Error("unexpected " + std::string(op_name(h.op)) + " reply from ps" + std::to_string(s) +
                " to SPARSE_PULL " + std::to_string(h.request_id));
  }
  std::vector<SparseSection> answer;
  std::string error;
  if (!decode_sparse_body(h.op, msg.frames[1].data(), msg.frames[1].size(), &answer, &error)) {
    throw Error("ps" + std::to_string(s) + " sent malformed SPARSE_ROWS: " + error);
  }
  take_rows_part(*r, s, h, std::move(answer));
}

void RowClient::take_rows_part(RowsRequest& r, size_t s, const Header& h, std::vector<SparseSection> answer) {
  ShardRows& q = r.shards[s];
  const std::string where = "ps" + std::to_string(s) + " sent SPARSE_ROWS part " + std::to_string(h.part) +
                            " of " + std::to_string(h.parts) + " to a pull in " + std::to_string(q.parts) +
                            " part(s)";
  if (std::max<uint64_t>(h.parts, 1) != q.parts || h.part >= q.parts) throw Error(where);
  if (q.got[h.part]) throw Error(where + ": that part came already");
  if (q.parts > 1) {  // a whole answer is checked against the whole pull by its caller
    const auto& asked = q.asked[h.part];
    bool matches = asked.size() == answer.size();
    for (size_t i = 0; matches && i < asked.size(); ++i) {
      matches = answer[i].table == asked[i].first && answer[i].count() == asked[i].second &&
                answer[i].values.size() == asked[i].second * answer[i].dim;
    }
    if (!matches) throw Error(where + ": its sections are not the rows that part asked for");
  }
  q.got[h.part] = true;
  for (const SparseSection& section : answer) row_dims_[section.table] = section.dim;
  q.answers[h.part] = std::move(answer);
  if (--q.left > 0) return;
  if (q.parts == 1) {
    r.rows[s] = std::move(q.answers[0]);
  } else {
    for (auto& part : q.answers) {
      std::string error;
      if (!append_sparse_part(&r.rows[s], std::move(part), &error))
        throw Error("ps" + std::to_string(s) + ": " + error);
    }
  }
  q.answers.clear();
  r.waiting[s] = false;
  --r.left;
}

std::vector<std::vector<SparseSection>> RowClient::receive_rows(uint64_t ticket) {
  PSTRAIN_CHECK(find(ticket) != requests_.end());
  Receive wait(*this, ticket);
  channel_.receive(wait);
  const auto r = find(ticket);
  std::vector<std::vector<SparseSection>> rows = std::move(r->rows);
  requests_.erase(r);
  return rows;
}

void RowClient::push_rows(uint64_t step, uint64_t samples,
                          const std::vector<std::vector<SparseSection>>& sections) {
  for (int s = 0; s < channel_.num_shards(); ++s) {
    std::vector<std::string> bodies = encode_sparse_parts(Op::kSparsePush, sections[static_cast<size_t>(s)],
                                                          channel_.chunk(s) * sizeof(float));
    const uint64_t rid = channel_.new_request();
    for (size_t k = 0; k < bodies.size(); ++k) {
      Header h = channel_.request(Op::kSparsePush, step, s);
      h.request_id = rid;
      h.samples = samples;
      h.checkpoint = step == marked_step_ ? marked_checkpoint_ : 0;
      h.offset = 0;
      h.length = bodies[k].size() / 4;
      h.part = k;
      h.parts = bodies.size();
      Frame payload(std::move(bodies[k]));
      channel_.send(s, h, &payload);
    }
  }
}

}  // namespace pstrain
