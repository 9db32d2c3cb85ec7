// CURVE (docs/security.md): a job over CURVE equals the same job in the clear; peers without the
// job's key (no CURVE at all, or another key) are refused at the handshake, logged, and change
// nothing, while the job completes; key files and the default policy.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "shared/net/curve.h"
#include "shared/util/error.h"
#include "shared/wire/protocol.h"
#include "test_util/build_paths.h"
#include "test_util/idx_writer.h"
#include "test_util/params.h"
#include "test_util/process.h"

namespace pstrain::test {
namespace {

class CurveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("curve");
    write_synthetic_mnist(dir_, "train", 600, 8, 8, 31, false);
    write_synthetic_mnist(dir_, "t10k", 100, 8, 8, 32, false);
    key_ = dir_ + "/job.key";
    ASSERT_TRUE(wait_for(spawn({PSTRAIN_KEYGEN_BIN, key_}, dir_ + "/keygen.log"), 10).ok()) << read_file(dir_ + "/keygen.log");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  Job job(const std::string& name, std::vector<std::string> extra) const {
    Job j;
    j.num_ps = 2;
    j.num_workers = 2;
    j.dir = dir_ + "/" + name;
    std::filesystem::create_directories(j.dir);
    // (64+1)x256 + 257x10 floats over 2 shards, in chunks of 20 KiB: ps1's frame bound is its
    // chunk, which every full chunk's frame reaches, CURVE's box around it passes (wire_protocol.md,
    // "Frame bound").
    j.args = {"--data-dir", dir_, "--cache-dir", dir_, "--hidden", "256", "--chunk-kib", "20", "--batch-size", "8", "--steps", "40",
              "--optimizer", "momentum", "--lr", "0.05", "--timeout", "30", "--save-params", j.dir + "/params"};
    j.args.insert(j.args.end(), extra.begin(), extra.end());
    return j;
  }

  std::string dir_, key_;
};

TEST_F(CurveTest, JobOverCurveEqualsTheSameJobInTheClear) {
  const Job plain = job("plain", {});
  const JobResult a = run_job(plain);
  ASSERT_TRUE(a.ok()) << a.logs;
  const Job curve = job("curve", {"--curve", "--curve-key-file", key_});
  const JobResult b = run_job(curve);
  ASSERT_TRUE(b.ok()) << b.logs;
  EXPECT_NE(b.logs.find("security: CURVE (encrypted, peers authenticated by the job's key from " + key_ + ")"),
            std::string::npos) << b.logs;
  EXPECT_EQ(a.logs.find("security: CURVE"), std::string::npos);
  EXPECT_LE(relative_difference(load_saved_params(plain.dir + "/params"), load_saved_params(curve.dir + "/params")),
            1e-6);
}

// A plain ZeroMQ peer and one with another key try a HELLO while the PS waits for its workers:
// neither gets an answer (the handshake fails), the wrong key is logged, and the job that runs
// then ends with the parameters of an undisturbed run.
TEST_F(CurveTest, PeersWithoutTheJobsKeyAreRefusedAndChangeNothing) {
  Job ref = job("reference", {"--curve", "--curve-key-file", key_});
  ref.num_ps = 1;
  ASSERT_TRUE(run_job(ref).ok());
  Job j = job("attacked", {"--curve", "--curve-key-file", key_});
  j.num_ps = 1;
  std::vector<pid_t> ps;
  const std::string address = start_servers(j, &ps).at(0);

  zmq::context_t context(1);
  Header hello;
  hello.op = Op::kHello;
  hello.sender = 1;
  hello.num_workers = 2;
  hello.total = 1210;
  const std::string frame = encode_header(hello);
  const auto answered = [&](const Security& security) {
    zmq::socket_t s(context, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    security.client(s);
    s.connect("tcp://" + address);
    s.send(zmq::buffer(frame), zmq::send_flags::dontwait);
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    return zmq::poll(&item, 1, std::chrono::milliseconds(1500)) > 0;
  };
  EXPECT_FALSE(answered(Security{})) << "a peer without CURVE got an answer";
  const std::string other = dir_ + "/other.key";
  ASSERT_TRUE(wait_for(spawn({PSTRAIN_KEYGEN_BIN, other}, dir_ + "/keygen2.log"), 10).ok());
  // It knows the server's public key (it is public) but holds another key pair of its own.
  Security impostor = read_key_file(other);
  const Security job_key = read_key_file(key_);
  const auto impostor_answered = [&] {
    zmq::socket_t s(context, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::curve_serverkey, job_key.public_key);
    s.set(zmq::sockopt::curve_publickey, impostor.public_key);
    s.set(zmq::sockopt::curve_secretkey, impostor.secret_key);
    s.connect("tcp://" + address);
    s.send(zmq::buffer(frame), zmq::send_flags::dontwait);
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    return zmq::poll(&item, 1, std::chrono::milliseconds(1500)) > 0;
  };
  EXPECT_FALSE(answered(impostor)) << "a peer that does not know the server's key got an answer";
  EXPECT_FALSE(impostor_answered()) << "a peer with another key pair got an answer";

  std::vector<pid_t> workers;
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> argv = {PSTRAIN_WORKER_BIN, "--index", std::to_string(i), "--num-ps", "1",
                                     "--num-workers", "2", "--ps-hosts", address};
    argv.insert(argv.end(), j.args.begin(), j.args.end());
    workers.push_back(spawn(argv, j.dir + "/w" + std::to_string(i) + ".log"));
  }
  for (pid_t w : workers) EXPECT_TRUE(wait_for(w, 60).ok()) << read_file(j.dir + "/w0.log");
  for (pid_t p : ps) EXPECT_TRUE(wait_for(p, 10).ok());
  const std::string ps_log = read_file(j.dir + "/ps0.log");
  EXPECT_NE(ps_log.find("refused a peer at 127.0.0.1: it does not hold the job's CURVE key"), std::string::npos)
      << ps_log;
  EXPECT_LE(relative_difference(load_saved_params(ref.dir + "/params"), load_saved_params(j.dir + "/params")), 1e-6);
}

TEST(CurveKeyTest, KeyFileErrorsAndThePolicy) {
  const std::string dir = make_temp_dir("curve-keys");
  const std::string path = dir + "/k";
  EXPECT_THROW(read_key_file(path), UsageError);
  { std::ofstream(path) << make_key_file_text(); }
  ::chmod(path.c_str(), 0644);
  try {
    read_key_file(path);
    ADD_FAILURE() << "a world-readable key file was accepted";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "CURVE key file '" + path + "' is readable by others (mode 0644); chmod 600 it");
  }
  ::chmod(path.c_str(), 0600);
  EXPECT_TRUE(read_key_file(path).curve);
  { std::ofstream(path) << "public = nonsense\nsecret = nonsense\n"; }
  EXPECT_THROW(read_key_file(path), UsageError);
  EXPECT_THROW(security_from_secret("short"), UsageError);
  for (const char* a : {"127.0.0.1:5", "localhost:9", "[::1]:7", "ipc://@x", "127.3.2.1:80"}) EXPECT_TRUE(is_loopback(a)) << a;
  for (const char* a : {"10.0.0.1:5", "node1:9", "0.0.0.0:0", "[fd00::1]:7"}) EXPECT_FALSE(is_loopback(a)) << a;
  SecurityOptions o;
  EXPECT_FALSE(resolve_security(o, {"127.0.0.1:0"}).curve);
  unsetenv("PSTRAIN_CURVE_KEY_FILE");
  unsetenv("PSTRAIN_CURVE_SECRET_KEY");
  EXPECT_THROW(resolve_security(o, {"10.1.1.1:5000"}), UsageError);  // off loopback, no key
  o.insecure = true;
  EXPECT_FALSE(resolve_security(o, {"10.1.1.1:5000"}).curve);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pstrain::test
