#include "cold/s3_xml.h"

#include <doctest/doctest.h>

#include <string>

namespace gpucache::cold {
namespace {

constexpr char kPage[] = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>gpucache-test</Name>
  <Prefix>gpucache/</Prefix>
  <KeyCount>2</KeyCount>
  <MaxKeys>2</MaxKeys>
  <IsTruncated>true</IsTruncated>
  <NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
  <Contents>
    <Key>gpucache/a&amp;b &lt;c&gt; &quot;d&quot; &apos;e&apos; &#233;&#x4E2D;</Key>
    <LastModified>2024-01-01T00:00:00.000Z</LastModified>
    <ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag>
    <Size>1048576</Size>
    <StorageClass>STANDARD</StorageClass>
  </Contents>
  <Contents><Key>gpucache/ b </Key><Size>0</Size><ETag>"e"</ETag><Owner><ID>x</ID></Owner></Contents>
</ListBucketResult>
)";

std::optional<ListPage> Parse(std::string_view s) {
  return ParseListPage(s);
}

TEST_CASE("S3Xml: a ListObjectsV2 page with entities, attributes and unknown elements") {
  std::optional<ListPage> page = Parse(kPage);
  REQUIRE(page);
  CHECK(page->truncated);
  CHECK(page->next_token == "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
  REQUIRE(page->objects.size() == 2);
  CHECK(page->objects[0].key == "gpucache/a&b <c> \"d\" 'e' \xC3\xA9\xE4\xB8\xAD");
  CHECK(page->objects[0].size == 1048576);
  CHECK(page->objects[0].etag == "9b2cf535f27731c974343645a3985328");
  CHECK(page->objects[1].key == "gpucache/ b ");  // spaces in keys are kept
  CHECK(page->objects[1].size == 0);
  CHECK(page->objects[1].etag == "e");
  CHECK(page->objects[0].modified_unix_s == 1704067200);  // 2024-01-01T00:00:00Z
  CHECK(page->objects[1].modified_unix_s == 0);           // not given: unknown
}

// The orphan sweep judges an object's age by it: a form not understood is "unknown" (0), which
// the sweep never deletes, never a wrong date.
TEST_CASE("S3Xml: LastModified as seconds since the epoch") {
  CHECK(ParseIsoUtcSeconds("2026-12-07T21:02:30.000Z") == 1796677350);
  CHECK(ParseIsoUtcSeconds("2026-12-07T21:02:30Z") == 1796677350);
  CHECK(ParseIsoUtcSeconds("2024-02-29T23:59:59.123456Z") == 1709251199);
  CHECK(ParseIsoUtcSeconds("1970-01-01T00:00:00Z") == 0);
  for (const char* bad : {"", "2026-12-07", "2026-12-07T21:02:30", "2026-12-07T21:02:30+01:00",
                          "2026-02-30T00:00:00Z", "2026-13-01T00:00:00Z", "2026-12-07T24:00:00Z",
                          "2026-12-07 21:02:30Z", "2026-12-07T21:02:30.Z", "+026-12-07T21:02:30Z",
                          "1969-12-31T23:59:59Z", "2026-12-07T21:02:30.000Zjunk"}) {
    CAPTURE(bad);
    CHECK_FALSE(ParseIsoUtcSeconds(bad));
  }
}

TEST_CASE("S3Xml: the last page and an empty listing") {
  auto last = Parse(
      "<ListBucketResult><IsTruncated>false</IsTruncated>"
      "<Contents><Key>k</Key><Size>7</Size></Contents></ListBucketResult>");
  REQUIRE(last);
  CHECK_FALSE(last->truncated);
  REQUIRE(last->objects.size() == 1);
  CHECK(last->objects[0].etag.empty());
  auto empty = Parse(
      "<ListBucketResult><Name>b</Name><KeyCount>0</KeyCount><Prefix/>"
      "<IsTruncated>false</IsTruncated></ListBucketResult>");
  REQUIRE(empty);
  CHECK(empty->objects.empty());
  // Review (2026-12-07): a page that does not say whether it is the last was taken as the last,
  // so a server that left it out of a full page cut the listing short (reclaim's proof that no
  // other manifest names a pack reads the whole listing).
  CHECK_FALSE(Parse("<ListBucketResult><Contents><Key>k</Key><Size>7</Size></Contents></ListBucketResult>"));
}

TEST_CASE("S3Xml: comments, CDATA and namespace prefixes") {
  auto page = Parse(
      "<?xml version='1.0'?><!-- c --><s3:ListBucketResult xmlns:s3='u'>"
      "<s3:Contents><s3:Key><![CDATA[a<&>b]]></s3:Key><!-- x --><s3:Size> 3 </s3:Size>"
      "</s3:Contents><s3:IsTruncated>false</s3:IsTruncated></s3:ListBucketResult>\n");
  REQUIRE(page);
  REQUIRE(page->objects.size() == 1);
  CHECK(page->objects[0].key == "a<&>b");
  CHECK(page->objects[0].size == 3);
}

TEST_CASE("S3Xml: malformed listings are refused") {
  const char* bad[] = {
      "",
      "not xml",
      "<ListBucketResult>",                    // unterminated
      "<ListBucketResult></ListBucketResul>",  // mismatched end tag
      "<Error><Code>x</Code></Error>",         // not a listing
      "<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>",  // no Key
      "<ListBucketResult><Contents><Key>k</Key></Contents></ListBucketResult>",    // no Size
      "<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key>k</Key><Size>1x</Size></Contents></ListBucketResult>",
      ("<ListBucketResult><Contents><Key>k</Key><Size>99999999999999999999</Size></Contents>"
       "</ListBucketResult>"),                                                 // Size overflows
      "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",  // no token
      "<ListBucketResult><IsTruncated>yes</IsTruncated></ListBucketResult>",
      "<ListBucketResult><Contents><Key>a&bogus;</Key><Size>1</Size></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key>a&amp</Key><Size>1</Size></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key>&#0;</Key><Size>1</Size></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key>&#xD800;</Key><Size>1</Size></Contents></ListBucketResult>",
      "<!DOCTYPE x [<!ENTITY a 'b'>]><ListBucketResult></ListBucketResult>",
      "<ListBucketResult></ListBucketResult><ListBucketResult></ListBucketResult>",
      "<ListBucketResult></ListBucketResult>trailing",
      "<ListBucketResult><Key><![CDATA[x</Key></ListBucketResult>",
      "<ListBucketResult a='>'",
  };
  for (const char* doc : bad) {
    CAPTURE(std::string(doc));
    CHECK_FALSE(Parse(doc));
  }
}

TEST_CASE("S3Xml: nesting is bounded") {
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += "<a>";
  for (int i = 0; i < 100; ++i) deep += "</a>";
  CHECK_FALSE(ParseXml(deep));
  std::string shallow;
  for (int i = 0; i < 10; ++i) shallow += "<a>";
  for (int i = 0; i < 10; ++i) shallow += "</a>";
  CHECK(ParseXml(shallow));
}

TEST_CASE("S3Xml: quoted attribute values may hold '>' and '/'") {
  auto root = ParseXml("<r a=\"x>/y\" b='z'><c/></r>");
  REQUIRE(root);
  CHECK(root->name == "r");
  REQUIRE(root->children.size() == 1);
  CHECK(root->children[0].name == "c");
}

TEST_CASE("S3Xml: error bodies") {
  auto error = ParseErrorBody(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code>"
      "<Message>The specified key does not exist &amp; never did.</Message>"
      "<Key>a/b</Key><RequestId>tx0</RequestId></Error>");
  REQUIRE(error);
  CHECK(error->code == "NoSuchKey");
  CHECK(error->message == "The specified key does not exist & never did.");
  CHECK_FALSE(ParseErrorBody("<html><body>502 Bad Gateway</body></html>"));
  CHECK_FALSE(ParseErrorBody("<Error><Code>Slow"));
}

TEST_CASE("S3Xml: entity decoding") {
  CHECK(XmlDecode("a&amp;b&lt;&gt;&quot;&apos;") == std::optional<std::string>("a&b<>\"'"));
  CHECK(XmlDecode("&#65;&#x42;&#x1F600;") == std::optional<std::string>("AB\xF0\x9F\x98\x80"));
  CHECK_FALSE(XmlDecode("&"));
  CHECK_FALSE(XmlDecode("&#;"));
  CHECK_FALSE(XmlDecode("&#x110000;"));
  CHECK_FALSE(XmlDecode("&AMP;"));
}

TEST_CASE("S3Xml: ETag quotes") {
  CHECK(UnquoteEtag("\"abc\"") == "abc");
  CHECK(UnquoteEtag("abc") == "abc");
  CHECK(UnquoteEtag("\"") == "\"");
}

}  // namespace
}  // namespace gpucache::cold
