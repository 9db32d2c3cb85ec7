#include "shared/net/curve.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "shared/util/error.h"
#include "shared/util/log.h"
#include "shared/util/text.h"

namespace pstrain {
namespace {

constexpr size_t kZ85KeyChars = 40;

bool valid_z85_key(const std::string& key) {
  uint8_t raw[32];
  return key.size() == kZ85KeyChars && zmq_z85_decode(raw, key.c_str()) != nullptr;
}

std::string frame_text(const zmq::message_t& m) { return std::string(static_cast<const char*>(m.data()), m.size()); }

}  // namespace

void Security::server(zmq::socket_t& socket) const {
  if (!curve) return;
  socket.set(zmq::sockopt::curve_server, 1);
  socket.set(zmq::sockopt::curve_secretkey, secret_key);
  socket.set(zmq::sockopt::zap_domain, "pstrain");
}

void Security::client(zmq::socket_t& socket) const {
  if (!curve) return;
  socket.set(zmq::sockopt::curve_serverkey, public_key);
  socket.set(zmq::sockopt::curve_publickey, public_key);
  socket.set(zmq::sockopt::curve_secretkey, secret_key);
}

std::string make_key_file_text() {
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0) throw Error("this libzmq cannot make CURVE keys (built without CURVE?)");
  return "# pstrain job key (ZeroMQ CURVE, Z85). Keep it private: mode 0600.\npublic = " + std::string(pub) +
         "\nsecret = " + std::string(sec) + "\n";
}

Security security_from_secret(const std::string& z85_secret) {
  if (!valid_z85_key(z85_secret)) throw UsageError("PSTRAIN_CURVE_SECRET_KEY is not a 40-character Z85 CURVE key");
  char pub[41];
  if (zmq_curve_public(pub, z85_secret.c_str()) != 0) throw UsageError("PSTRAIN_CURVE_SECRET_KEY is not a CURVE key");
  return Security{true, pub, z85_secret};
}

Security read_key_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw UsageError("CURVE key file '" + path + "' does not exist (make one with pstrain-keygen PATH)");
  }
  if ((st.st_mode & 077) != 0) {
    std::ostringstream mode;
    mode << std::oct << (st.st_mode & 0777);
    throw UsageError("CURVE key file '" + path + "' is readable by others (mode 0" + mode.str() +
                     "); chmod 600 it");
  }
  std::ifstream in(path);
  std::string line;
  Security s;
  s.curve = true;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (trim(line).empty() || trim(line)[0] == '#' || eq == std::string::npos) continue;
    const std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    if (key == "public") s.public_key = value;
    if (key == "secret") s.secret_key = value;
  }
  if (!valid_z85_key(s.public_key) || !valid_z85_key(s.secret_key)) {
    throw UsageError("CURVE key file '" + path + "' has no valid 'public = ' and 'secret = ' lines (Z85 keys)");
  }
  char derived[41];
  if (zmq_curve_public(derived, s.secret_key.c_str()) != 0 || s.public_key != derived) {
    throw UsageError("CURVE key file '" + path + "': the public key is not the secret key's");
  }
  return s;
}

bool is_loopback(const std::string& address) {
  if (address.rfind("ipc://", 0) == 0 || address.rfind("inproc://", 0) == 0) return true;
  std::string host = address;
  const size_t colon = address.rfind(':');
  if (colon != std::string::npos && address.find(']') == std::string::npos && address.find(':') == colon) {
    host = address.substr(0, colon);
  } else if (address.rfind('[', 0) == 0) {
    host = address.substr(1, address.find(']') - 1);
  }
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

Security resolve_security(const SecurityOptions& o, const std::vector<std::string>& addresses) {
  bool remote = false;
  for (const auto& a : addresses) remote = remote || (!a.empty() && !is_loopback(a));
  if (o.insecure) {
    if (remote) {
      PSLOG(WARN) << "--insecure: traffic to and from non-loopback addresses is neither authenticated nor "
                     "encrypted; anyone who reaches these ports can join the job";
    }
    return Security{};
  }
  if (!o.curve && !remote) return Security{};
  std::string file = o.key_file;
  if (file.empty() && std::getenv("PSTRAIN_CURVE_KEY_FILE") != nullptr) file = std::getenv("PSTRAIN_CURVE_KEY_FILE");
  const char* secret = std::getenv("PSTRAIN_CURVE_SECRET_KEY");
  if (!file.empty() || secret != nullptr) {
    const Security s = !file.empty() ? read_key_file(file) : security_from_secret(secret);
    PSLOG(INFO) << "security: CURVE (encrypted, peers authenticated by the job's key from "
                << (!file.empty() ? file : std::string("PSTRAIN_CURVE_SECRET_KEY")) << ")";
    return s;
  }
  throw UsageError(std::string(o.curve ? "--curve" : "traffic off loopback is encrypted by default (CURVE)") +
                   " but no job key was given: make one with 'pstrain-keygen job.key' and pass --curve-key-file "
                   "job.key (or PSTRAIN_CURVE_KEY_FILE); --insecure turns encryption off");
}

ZapHandler::ZapHandler(zmq::context_t& context, const std::string& allowed_public_z85)
    : socket_(context, zmq::socket_type::rep), allowed_(32, '\0') {
  if (zmq_z85_decode(reinterpret_cast<uint8_t*>(allowed_.data()), allowed_public_z85.c_str()) == nullptr) {
    throw Error("ZAP handler: the job's public key is not Z85");
  }
  socket_.set(zmq::sockopt::linger, 0);
  socket_.bind("inproc://zeromq.zap.01");
  thread_ = std::thread([this] { run(); });
}

ZapHandler::~ZapHandler() {
  stop_.store(true);
  thread_.join();
}

// ZAP (ZeroMQ RFC 27): request = version, request id, domain, address, identity, mechanism,
// credentials...; reply = version, request id, status code, status text, user id, metadata.
void ZapHandler::run() {
  std::set<std::string> logged;
  while (!stop_.load()) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    try {
      if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) continue;
      std::vector<zmq::message_t> request;
      do {
        request.emplace_back();
        if (!socket_.recv(request.back(), zmq::recv_flags::none)) break;
      } while (socket_.get(zmq::sockopt::rcvmore));
      const bool well_formed = request.size() >= 6 && frame_text(request[0]) == "1.0";
      const bool admitted = well_formed && frame_text(request[5]) == "CURVE" && request.size() == 7 &&
                            frame_text(request[6]) == allowed_;
      const std::string address = request.size() > 3 ? frame_text(request[3]) : "?";
      if (!admitted) {
        ++refused_;
        if (logged.insert(address).second) {
          PSLOG(WARN) << "refused a peer at " << address << ": it does not hold the job's CURVE key";
        }
      }
      std::vector<std::string> reply = {"1.0", request.size() > 1 ? frame_text(request[1]) : "",
                                        admitted ? "200" : "400", admitted ? "OK" : "not the job's key", "", ""};
      for (size_t i = 0; i < reply.size(); ++i) {
        socket_.send(zmq::buffer(reply[i]), i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      PSLOG(WARN) << "ZAP handler: " << e.what();
    }
  }
}

std::unique_ptr<ZapHandler> make_zap_handler(zmq::context_t& context, const Security& security) {
  if (!security.curve) return nullptr;
  return std::make_unique<ZapHandler>(context, security.public_key);
}

}  // namespace pstrain
