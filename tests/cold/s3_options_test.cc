#include "cold/s3_options.h"

#include <doctest/doctest.h>
#include <stdlib.h>

#include <fstream>

#include "tests/support/temp_dir.h"

namespace gpucache::cold {
namespace {

S3Options Good() {
  S3Options o;
  o.endpoint = "http://127.0.0.1:8000";
  o.bucket = "gpucache-test";
  o.region = "us-east-1";
  o.access_key = "AK";
  o.secret_key = "VerySecretValue";
  return o;
}

TEST_CASE("S3Options: a complete set validates") {
  CHECK(Validate(Good()) == "");
  S3Options https = Good();
  https.endpoint = "https://s3.example.com/";
  CHECK(Validate(https) == "");
}

TEST_CASE("S3Options: each bad field is named, and no message echoes a key") {
  auto problem = [](auto mutate) {
    S3Options o = Good();
    mutate(o);
    std::string message = Validate(o);
    CHECK(message.find("VerySecretValue") == std::string::npos);
    return message;
  };
  CHECK(problem([](S3Options& o) { o.endpoint = "ftp://h"; }).find("endpoint") !=
        std::string::npos);
  CHECK(problem([](S3Options& o) { o.endpoint = "127.0.0.1:8000"; }) != "");
  CHECK(problem([](S3Options& o) { o.endpoint = "http://"; }) != "");
  CHECK(problem([](S3Options& o) { o.endpoint = "http://user:pw@h"; }) != "");
  CHECK(problem([](S3Options& o) { o.bucket = "Upper"; }).find("bucket") != std::string::npos);
  CHECK(problem([](S3Options& o) { o.region = ""; }).find("region") != std::string::npos);
  CHECK(problem([](S3Options& o) { o.access_key = ""; }).find("access key") != std::string::npos);
  CHECK(problem([](S3Options& o) { o.secret_key = ""; }).find("secret key") != std::string::npos);
  CHECK(problem([](S3Options& o) { o.connect_timeout_ms = 0; }) != "");
  CHECK(problem([](S3Options& o) { o.transfer_timeout_ms = 0; }) != "");
}

TEST_CASE("S3Options: bucket naming rules") {
  CHECK(IsValidBucketName(std::string(63, 'a')));
  for (const char* ok : {"abc", "gpucache-test", "my.bucket.1", "a1b"}) {
    CAPTURE(std::string(ok));
    CHECK(IsValidBucketName(ok));
  }
  for (const char* bad : {"ab", "ABC", "-abc", "abc-", ".abc", "a..b", "a_b", "a b", "a.-b",
                          "192.168.1.1", "xn--abc", "abc-s3alias", "abc--ol-s3"}) {
    CAPTURE(std::string(bad));
    CHECK_FALSE(IsValidBucketName(bad));
  }
  CHECK_FALSE(IsValidBucketName(std::string(64, 'a')));
}

TEST_CASE("S3Options: the environment overlays what is set") {
  S3Options o = Good();
  ::setenv("GPUCACHE_S3_ENDPOINT", "https://s3.other:9000", 1);
  ::setenv("GPUCACHE_S3_BUCKET", "other-bucket", 1);
  ::setenv("GPUCACHE_S3_REGION", "", 1);  // empty: ignored
  ::unsetenv("GPUCACHE_S3_ACCESS_KEY");
  ::setenv("GPUCACHE_S3_SECRET_KEY", "EnvSecret", 1);
  ApplyEnvironment(o);
  CHECK(o.endpoint == "https://s3.other:9000");
  CHECK(o.bucket == "other-bucket");
  CHECK(o.region == "us-east-1");
  CHECK(o.access_key == "AK");
  CHECK(o.secret_key == "EnvSecret");
  for (const char* v : {"GPUCACHE_S3_ENDPOINT", "GPUCACHE_S3_BUCKET", "GPUCACHE_S3_REGION",
                        "GPUCACHE_S3_SECRET_KEY"}) {
    ::unsetenv(v);
  }
}

TEST_CASE("S3Options: credentials file") {
  test::TempDir dir;
  std::string path = dir.path() + "/credentials";
  auto write = [&](const std::string& text) { std::ofstream(path) << text; };
  S3Options o = Good();
  o.credentials_file = path;

  write("# rotated 2024-01-01\n\n access_key = NEWAK \nsecret_key=New=Secret\r\n");
  CHECK(LoadCredentialsFile(o) == "");
  CHECK(o.access_key == "NEWAK");
  CHECK(o.secret_key == "New=Secret");  // only the first '=' separates

  write("access_key=X\nsecret_key=TopSecretLine\nsecret=TopSecretLine\n");
  std::string error = LoadCredentialsFile(o);
  CHECK(error.find("line 3") != std::string::npos);
  CHECK(error.find("TopSecretLine") == std::string::npos);
  CHECK(o.access_key == "NEWAK");  // unchanged on error

  write("TopSecretLine\n");
  error = LoadCredentialsFile(o);
  CHECK(error.find("line 1") != std::string::npos);
  CHECK(error.find("TopSecretLine") == std::string::npos);

  write("access_key=only\n");
  CHECK(LoadCredentialsFile(o) != "");

  o.credentials_file = dir.path() + "/missing";
  CHECK(LoadCredentialsFile(o) != "");
  o.credentials_file = "";
  CHECK(LoadCredentialsFile(o) == "");  // nothing to do
}

}  // namespace
}  // namespace gpucache::cold
