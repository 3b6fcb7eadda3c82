#include "cold/s3_request.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cold/digest.h"

namespace gpucache::cold {
namespace {

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST_CASE("S3Request: UriEncode keeps only unreserved bytes") {
  CHECK(UriEncode("AZaz09-_.~", false) == "AZaz09-_.~");
  CHECK(UriEncode("a b+c*d=e&f%g", false) == "a%20b%2Bc%2Ad%3De%26f%25g");
  CHECK(UriEncode("\xC3\xA9", false) == "%C3%A9");  // UTF-8 bytes, uppercase hex
  CHECK(UriEncode(std::string_view("\0\xff", 2), false) == "%00%FF");
  CHECK(UriEncode("a/b", false) == "a%2Fb");
  CHECK(UriEncode("a/b", true) == "a/b");
}

TEST_CASE("S3Request: object keys keep '/' and encode everything else") {
  CHECK(ObjectUrl("http://127.0.0.1:8000", "bkt", "gpucache/packs/ab cd") ==
        "http://127.0.0.1:8000/bkt/gpucache/packs/ab%20cd");
  CHECK(ObjectUrl("http://h/", "bkt", "a//b/../c?d#e") == "http://h/bkt/a//b/../c%3Fd%23e");
  CHECK(ObjectUrl("https://h:9/", "bkt", "k+=&") == "https://h:9/bkt/k%2B%3D%26");
  CHECK(ObjectUrl("http://h", "bkt", "caf\xC3\xA9") == "http://h/bkt/caf%C3%A9");
}

TEST_CASE("S3Request: bucket URL carries the query") {
  CHECK(ObjectUrl("http://h:1", "bkt", "", "list-type=2") == "http://h:1/bkt?list-type=2");
  CHECK(ObjectUrl("http://h:1//", "bkt", "") == "http://h:1/bkt");
}

TEST_CASE("S3Request: canonical query sorts by name and encodes names and values") {
  QueryParams params = {
      {"prefix", "gpucache/x y"}, {"list-type", "2"}, {"continuation-token", "1ab+/c=="}};
  CHECK(CanonicalQuery(params) ==
        "continuation-token=1ab%2B%2Fc%3D%3D&list-type=2&prefix=gpucache%2Fx%20y");
}

TEST_CASE("S3Request: canonical query renders an empty value as name=") {
  CHECK(CanonicalQuery({{"uploads", ""}}) == "uploads=");
  CHECK(CanonicalQuery({{"prefix", ""}, {"list-type", "2"}}) == "list-type=2&prefix=");
  CHECK(CanonicalQuery({}) == "");
}

TEST_CASE("S3Request: canonical query orders by encoded name, byte-wise, then by value") {
  // '-' (0x2D) < 'B' (0x42) < '_' (0x5F) < 'b' (0x62)
  CHECK(CanonicalQuery({{"ab", "1"}, {"a_b", "1"}, {"aB", "1"}, {"a-b", "1"}}) ==
        "a-b=1&aB=1&a_b=1&ab=1");
  CHECK(CanonicalQuery({{"k", "b"}, {"k", "a"}}) == "k=a&k=b");
  // A name that needs encoding sorts by its encoded form: "%20" < "A".
  CHECK(CanonicalQuery({{"A", "1"}, {" ", "2"}}) == "%20=2&A=1");
}

TEST_CASE("S3Request: SHA-256 payload hashes") {
  CHECK(Sha256Hex(Bytes("abc")) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(Sha256Hex({}) == kEmptySha256);
}

struct ClassifyCase {
  CURLcode curl;
  int status;
  const char* code;
  ObjectErrorKind want;
};

TEST_CASE("S3Request: ClassifyFailure table") {
  using K = ObjectErrorKind;
  const ClassifyCase cases[] = {
      // HTTP statuses and S3 codes.
      {CURLE_OK, 500, "InternalError", K::kTemporary},
      {CURLE_OK, 502, "", K::kTemporary},
      {CURLE_OK, 503, "SlowDown", K::kTemporary},
      {CURLE_OK, 503, "ServiceUnavailable", K::kTemporary},
      {CURLE_OK, 504, "", K::kTemporary},
      {CURLE_OK, 429, "", K::kTemporary},
      {CURLE_OK, 400, "RequestTimeout", K::kTemporary},
      {CURLE_OK, 404, "NoSuchKey", K::kNotFound},
      {CURLE_OK, 404, "", K::kNotFound},  // HEAD: no body
      {CURLE_OK, 404, "NoSuchBucket", K::kPermanent},
      {CURLE_OK, 403, "SignatureDoesNotMatch", K::kPermanent},
      {CURLE_OK, 403, "AccessDenied", K::kPermanent},
      {CURLE_OK, 403, "InvalidAccessKeyId", K::kPermanent},
      {CURLE_OK, 403, "", K::kPermanent},
      {CURLE_OK, 400, "InvalidArgument", K::kPermanent},
      {CURLE_OK, 400, "XAmzContentSHA256Mismatch", K::kPermanent},
      {CURLE_OK, 416, "InvalidRange", K::kPermanent},
      {CURLE_OK, 301, "PermanentRedirect", K::kPermanent},
      {CURLE_OK, 200, "", K::kPermanent},  // an unexpected success status
      // Transport failures.
      {CURLE_OPERATION_TIMEDOUT, 0, "", K::kTemporary},
      {CURLE_COULDNT_CONNECT, 0, "", K::kTemporary},
      {CURLE_COULDNT_RESOLVE_HOST, 0, "", K::kTemporary},
      {CURLE_RECV_ERROR, 0, "", K::kTemporary},
      {CURLE_SEND_ERROR, 0, "", K::kTemporary},
      {CURLE_GOT_NOTHING, 0, "", K::kTemporary},
      {CURLE_PARTIAL_FILE, 200, "", K::kTemporary},
      {CURLE_SSL_CONNECT_ERROR, 0, "", K::kTemporary},
      {CURLE_URL_MALFORMAT, 0, "", K::kPermanent},
      {CURLE_UNSUPPORTED_PROTOCOL, 0, "", K::kPermanent},
      {CURLE_PEER_FAILED_VERIFICATION, 0, "", K::kPermanent},
      {CURLE_WEIRD_SERVER_REPLY, 0, "", K::kPermanent},
      // A transport failure in the middle of a temporary reply stays temporary.
      {CURLE_WEIRD_SERVER_REPLY, 503, "", K::kTemporary},
  };
  for (const ClassifyCase& c : cases) {
    CAPTURE(CurlCodeName(c.curl));
    CAPTURE(c.status);
    CAPTURE(std::string(c.code));
    CHECK(ClassifyFailure(FailureFacts{c.curl, c.status, c.code}) == c.want);
  }
}

TEST_CASE("S3Request: ambiguity rule") {
  CHECK_FALSE(IsAmbiguous(false, 0));  // refused, DNS, connect timeout
  CHECK(IsAmbiguous(true, 0));         // timeout or reset after connecting
  CHECK(IsAmbiguous(true, 500));
  CHECK(IsAmbiguous(true, 503));
  CHECK(IsAmbiguous(true, 200));  // a 200 whose body was cut off
  CHECK_FALSE(IsAmbiguous(true, 403));
  CHECK_FALSE(IsAmbiguous(true, 400));
  CHECK_FALSE(IsAmbiguous(true, 429));  // refused by throttling
}

TEST_CASE("S3Request: curl code names") {
  CHECK(CurlCodeName(CURLE_OPERATION_TIMEDOUT) == "CURLE_OPERATION_TIMEDOUT");
  CHECK(CurlCodeName(CURLE_COULDNT_CONNECT) == "CURLE_COULDNT_CONNECT");
  CHECK(CurlCodeName(static_cast<CURLcode>(9999)) == "CURLE_9999");
}

TEST_CASE("S3Request: ScrubSecret removes every occurrence") {
  CHECK(ScrubSecret("a SECRET b SECRETSECRET", "SECRET") == "a *** b ******");
  CHECK(ScrubSecret("nothing here", "SECRET") == "nothing here");
  CHECK(ScrubSecret("x", "") == "x");
}

}  // namespace
}  // namespace gpucache::cold
