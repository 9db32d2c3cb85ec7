// Authenticated, encrypted traffic with ZeroMQ's CURVE (docs/security.md). A job has one key
// pair, made by the launcher (pstrain-keygen) and handed to every process in a 0600 file or the
// environment, never on a command line. Every server socket (PS, ring link, ring coordinator)
// is a CURVE server with the job's key; every client connects with the job's key as both the
// server key it expects and its own; a ZAP handler admits only clients that prove they hold the
// job's key. A peer without it fails the handshake and never reaches pstrain's code.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

namespace pstrain {

// The security flags (filled from the job's options in main).
struct SecurityOptions {
  bool curve = false;     // --curve: CURVE also on loopback
  bool insecure = false;  // --insecure: CURVE off, even off loopback (a warning)
  // --curve-key-file: the job's key file (else $PSTRAIN_CURVE_KEY_FILE / $PSTRAIN_CURVE_SECRET_KEY).
  std::string key_file;
};

// Security of a process's sockets. `curve` off: plain TCP/ipc.
struct Security {
  bool curve = false;
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;
  void server(zmq::socket_t& socket) const;  // before bind
  void client(zmq::socket_t& socket) const;  // before connect
};

// A new key pair as the text of a key file ("public = ...", "secret = ...").
std::string make_key_file_text();
// Reads a key file; throws pstrain::UsageError naming the file when it is missing, readable by
// others than its owner (mode must be 0600 or stricter), or not a pstrain key file.
Security read_key_file(const std::string& path);
// From a Z85 secret key alone (PSTRAIN_CURVE_SECRET_KEY); throws UsageError if it is not one.
Security security_from_secret(const std::string& z85_secret);

// True for 127.0.0.0/8, ::1, localhost and ipc:// addresses ("host:port" or "ipc://NAME").
bool is_loopback(const std::string& address);

// The process's security from its options and the environment (PSTRAIN_CURVE_KEY_FILE,
// PSTRAIN_CURVE_SECRET_KEY): --insecure: off (a WARN when `addresses` has a non-loopback one);
// --curve: on; default: on when any of `addresses` (what it binds and connects to) is not
// loopback. On without a key is a UsageError saying how to make one.
Security resolve_security(const SecurityOptions& options, const std::vector<std::string>& addresses);

// Admits CURVE clients whose public key is the job's, refuses (and logs, once per address)
// every other. One per context, created before its first CURVE server socket; its own thread
// owns its socket (inproc://zeromq.zap.01).
class ZapHandler {
 public:
  ZapHandler(zmq::context_t& context, const std::string& allowed_public_z85);
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;
  uint64_t refused() const { return refused_.load(); }

 private:
  void run();
  zmq::socket_t socket_;
  std::string allowed_;  // 32 raw bytes
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> refused_{0};
  std::thread thread_;
};

// ZapHandler when `security` has CURVE on, else nothing.
std::unique_ptr<ZapHandler> make_zap_handler(zmq::context_t& context, const Security& security);

}  // namespace pstrain
