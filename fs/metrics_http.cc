#include "fs/metrics_http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>

#include <cstring>

namespace gpucache {
namespace {

MHD_Result Answer(void* cls, MHD_Connection* connection, const char* url, const char* method,
                  const char*, const char*, size_t*, void**) {
  auto* render = static_cast<std::function<std::string()>*>(cls);
  bool ok = std::strcmp(method, "GET") == 0 && std::strcmp(url, "/metrics") == 0;
  std::string body = ok ? (*render)() : "gpucachefs: GET /metrics\n";
  MHD_Response* response =
      MHD_create_response_from_buffer(body.size(), body.data(), MHD_RESPMEM_MUST_COPY);
  MHD_add_response_header(response, "Content-Type",
                          ok ? "text/plain; version=0.0.4; charset=utf-8" : "text/plain");
  MHD_Result r = MHD_queue_response(connection, ok ? MHD_HTTP_OK : MHD_HTTP_NOT_FOUND, response);
  MHD_destroy_response(response);
  return r;
}

}  // namespace

bool MetricsHttpServer::Start(const std::string& listen, std::function<std::string()> render,
                              std::string* error) {
  auto colon = listen.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  int port = colon == std::string::npos ? -1 : std::atoi(listen.c_str() + colon + 1);
  if (colon == std::string::npos || port <= 0 || port > 65535 ||
      ::inet_pton(AF_INET, listen.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    *error = "metrics.listen: expected IPv4:PORT, got '" + listen + "'";
    return false;
  }
  addr.sin_port = htons(static_cast<uint16_t>(port));
  render_ = std::move(render);
  daemon_ = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, static_cast<uint16_t>(port), nullptr,
                             nullptr, &Answer, &render_, MHD_OPTION_SOCK_ADDR, &addr,
                             MHD_OPTION_CONNECTION_LIMIT, 16u, MHD_OPTION_CONNECTION_TIMEOUT, 10u,
                             MHD_OPTION_END);
  if (!daemon_) {
    *error = "cannot serve metrics on " + listen + " (address in use?)";
    return false;
  }
  return true;
}

void MetricsHttpServer::Stop() {
  if (daemon_) MHD_stop_daemon(daemon_);
  daemon_ = nullptr;
}

}  // namespace gpucache
