// Binding a PS's ipc:// socket: a live server keeps its name; a stale socket file is reused.
#include "shared/net/zmq_util.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <zmq.hpp>

#include "shared/util/error.h"
#include "test_util/idx_writer.h"

namespace pstrain {
namespace {

std::string bind_error(zmq::socket_t& socket, const std::string& name) {
  try {
    bind_ipc(socket, name, "test server");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ZmqUtilTest, ASecondServerCannotTakeALiveIpcPath) {
  const std::string path = make_temp_dir("zmq-ipc") + "/ps0.sock";
  zmq::context_t context(1);
  zmq::socket_t first(context, zmq::socket_type::router), second(context, zmq::socket_type::router);
  first.set(zmq::sockopt::linger, 0);
  second.set(zmq::sockopt::linger, 0);
  bind_ipc(first, path, "ps0");
  const std::string error = bind_error(second, path);
  EXPECT_NE(error.find("another process is serving on that path"), std::string::npos) << error;

  // The first server still gets its clients' messages (a bounded wait: fail, not hang).
  first.set(zmq::sockopt::rcvtimeo, 10000);
  zmq::socket_t client(context, zmq::socket_type::dealer);
  client.set(zmq::sockopt::linger, 0);
  client.connect("ipc://" + path);
  client.send(zmq::str_buffer("hello"), zmq::send_flags::none);
  zmq::message_t identity, body;
  ASSERT_TRUE(first.recv(identity));
  ASSERT_TRUE(first.recv(body));
  EXPECT_EQ(body.to_string(), "hello");
}

TEST(ZmqUtilTest, AStaleSocketFileIsReplaced) {
  const std::string path = make_temp_dir("zmq-ipc") + "/ps0.sock";
  // What a killed server leaves: a socket file nobody listens on.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  ::close(fd);
  ASSERT_EQ(::access(path.c_str(), F_OK), 0);

  zmq::context_t context(1);
  zmq::socket_t server(context, zmq::socket_type::router);
  server.set(zmq::sockopt::linger, 0);
  EXPECT_EQ(bind_error(server, path), "");
}

TEST(ZmqUtilTest, AnAbstractNameInUseIsRefused) {
  const std::string name = "@pstrain-test-" + std::to_string(::getpid()) + "-abstract";
  zmq::context_t context(1);
  zmq::socket_t first(context, zmq::socket_type::router), second(context, zmq::socket_type::router);
  first.set(zmq::sockopt::linger, 0);
  second.set(zmq::sockopt::linger, 0);
  bind_ipc(first, name, "ps0");
  const std::string error = bind_error(second, name);
  EXPECT_NE(error.find("cannot bind test server on ipc://" + name), std::string::npos) << error;
}

}  // namespace
}  // namespace pstrain
