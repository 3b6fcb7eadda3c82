#include "fs/metrics_http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <string_view>
#include <cstring>

#include "store/posix_io.h"

namespace gpucache {
namespace {

MHD_Result Reply(MHD_Connection* connection, unsigned status, const std::string& body,
                 const char* content_type) {
  MHD_Response* response =
      MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  MHD_add_response_header(response, "Content-Type", content_type);
  MHD_Result r = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return r;
}

// Whether `header` is "Bearer <token>" (the scheme in any case, RFC 7235), the token compared in
// time independent of where it differs.
bool CarriesToken(const char* header, const std::string& token) {
  constexpr std::string_view kScheme = "bearer ";
  if (!header || std::strlen(header) != kScheme.size() + token.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return false;
  }
  unsigned char diff = 0;
  for (size_t i = 0; i < token.size(); ++i) {
    diff |= static_cast<unsigned char>(header[kScheme.size() + i] ^ token[i]);
  }
  return diff == 0;
}

MHD_Result Answer(void* cls, MHD_Connection* connection, const char* url, const char* method,
                  const char*, const char*, size_t*, void**) {
  auto* served = static_cast<const MetricsHttpServer::Served*>(cls);
  bool get = std::strcmp(method, "GET") == 0 || std::strcmp(method, "HEAD") == 0;
  if (get && std::strcmp(url, "/metrics") == 0) {
    std::string token;
    {
      MutexLock lock(served->mu);
      token = served->token;
    }
    if (!token.empty() &&
        !CarriesToken(MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION),
                      token)) {
      MHD_Response* response = MHD_create_response_from_buffer(
          0, const_cast<char*>(""), MHD_RESPMEM_PERSISTENT);
      MHD_add_response_header(response, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
      MHD_Result r = MHD_queue_response(connection, MHD_HTTP_UNAUTHORIZED, response);
      MHD_destroy_response(response);
      return r;
    }
    MetricsFormat format = NegotiateMetricsFormat(
        MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT));
    std::string body = served->render();
    if (format == MetricsFormat::kOpenMetrics) body = ToOpenMetrics(body);
    return Reply(connection, MHD_HTTP_OK, body, ContentTypeOf(format));
  }
  if (get && std::strcmp(url, "/healthz") == 0) {
    return Reply(connection, MHD_HTTP_OK, "ok\n", "text/plain");
  }
  return Reply(connection, MHD_HTTP_NOT_FOUND, "gpucachefs: GET /metrics or /healthz\n", "text/plain");
}

// The q of one media range ("type/subtype;param=..;q=0.5"), 1 when absent.
double QualityOf(std::string_view range) {
  size_t at = range.find("q=");
  while (at != std::string_view::npos && at > 0 && range[at - 1] != ';' && range[at - 1] != ' ') {
    at = range.find("q=", at + 1);
  }
  if (at == std::string_view::npos) return 1;
  return std::strtod(std::string(range.substr(at + 2)).c_str(), nullptr);
}

}  // namespace

MetricsFormat NegotiateMetricsFormat(const char* accept) {
  if (!accept) return MetricsFormat::kPrometheusText;
  double openmetrics = 0, text = 0;
  std::string_view rest(accept);
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view range = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    while (!range.empty() && range.front() == ' ') range.remove_prefix(1);
    double q = QualityOf(range);
    if (range.starts_with("application/openmetrics-text")) openmetrics = std::max(openmetrics, q);
    else if (range.starts_with("text/plain") || range.starts_with("*/*") ||
             range.starts_with("text/*")) {
      text = std::max(text, q);
    }
  }
  // Ties go to OpenMetrics: a client that names it asked for it.
  return openmetrics > 0 && openmetrics >= text ? MetricsFormat::kOpenMetrics
                                                : MetricsFormat::kPrometheusText;
}

bool ParseListenAddress(const std::string& listen, sockaddr_in* out, std::string* error) {
  auto colon = listen.rfind(':');
  *out = sockaddr_in{};
  out->sin_family = AF_INET;
  unsigned port = 0;
  bool ok = colon != std::string::npos && colon + 1 < listen.size();
  if (ok) {
    const char* end = listen.data() + listen.size();
    auto [p, ec] = std::from_chars(listen.data() + colon + 1, end, port);
    ok = ec == std::errc() && p == end && port >= 1 && port <= 65535;
  }
  ok = ok && ::inet_pton(AF_INET, listen.substr(0, colon).c_str(), &out->sin_addr) == 1;
  if (!ok) {
    *error = "metrics.listen: expected IPv4:PORT with PORT 1-65535 (e.g. \"127.0.0.1:9110\"), got '" +
             listen + "'";
    return false;
  }
  out->sin_port = htons(static_cast<uint16_t>(port));
  return true;
}

std::optional<std::string> LoadMetricsToken(const std::string& path, std::string* error) {
  std::string why;
  std::optional<std::string> bytes = ReadSmallRegularFile(path, 4096, &why);
  if (!bytes) {
    *error = "metrics.bearer_token_file: cannot read " + why;
    return std::nullopt;
  }
  std::string_view token(*bytes);
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.front()))) token.remove_prefix(1);
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.remove_suffix(1);
  bool printable = std::all_of(token.begin(), token.end(), [](char c) { return c > ' ' && c < 127; });
  if (token.empty() || !printable) {
    *error = "metrics.bearer_token_file: " + path +
             (token.empty() ? " is empty" : " holds a space or a character that is not printable ASCII");
    return std::nullopt;
  }
  return std::string(token);
}

MetricsHttpServer::~MetricsHttpServer() {
  Stop();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

bool MetricsHttpServer::Bind(const std::string& listen, std::string* error) {
  sockaddr_in addr;
  if (!ParseListenAddress(listen, &addr, error)) return false;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1;
  if (fd < 0 || ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 128) != 0) {
    *error = "cannot serve metrics on " + listen + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return false;
  }
  listen_fd_ = fd;
  listen_ = listen;
  return true;
}

bool MetricsHttpServer::Start(std::function<std::string()> render, std::string token, std::string* error) {
  served_.render = std::move(render);
  SetToken(std::move(token));
  daemon_ = MHD_start_daemon(
      MHD_USE_EPOLL_INTERNAL_THREAD, 0, nullptr, nullptr, &Answer, &served_,
      MHD_OPTION_LISTEN_SOCKET, listen_fd_, MHD_OPTION_CONNECTION_LIMIT, kMaxConnections,
      MHD_OPTION_CONNECTION_TIMEOUT, kIdleSeconds, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
      kConnectionMemory, MHD_OPTION_END);
  if (!daemon_) {
    *error = "cannot serve metrics on " + listen_;
    return false;
  }
  listen_fd_ = -1;  // the daemon owns it now
  return true;
}

void MetricsHttpServer::SetToken(std::string token) {
  MutexLock lock(served_.mu);
  served_.token = std::move(token);
}

void MetricsHttpServer::Stop() {
  if (daemon_) MHD_stop_daemon(daemon_);
  daemon_ = nullptr;
}

}  // namespace gpucache
