// A minimal XML reader for the two S3 replies the client needs: ListObjectsV2 pages
// (ListBucketResult) and error bodies (Error). It is strict where it matters — tags must
// nest and match, entities must be known, nesting is bounded, DOCTYPE is refused (no entity
// expansion) — and ignores what it does not need (attributes, namespaces, comments,
// processing instructions, unknown elements). Element names match on their local part
// ("s3:Key" matches "Key").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cold/object_store.h"

namespace gpucache::cold {

// One parsed element: its local name, its decoded character data (text and CDATA of the
// element itself, concatenated), and its child elements in document order.
struct XmlElement {
  std::string name;
  std::string text;
  std::vector<XmlElement> children;

  // The first child named `name`, or nullptr.
  const XmlElement* Child(std::string_view name) const;
};

// Parses a whole document into its root element; nullopt when malformed.
std::optional<XmlElement> ParseXml(std::string_view document);

// Decodes &amp; &lt; &gt; &quot; &apos; &#NN; &#xHH; in `text`; nullopt on an unknown or
// malformed entity or a code point that is not a valid XML character.
std::optional<std::string> XmlDecode(std::string_view text);

struct ListPage {
  std::vector<ObjectMeta> objects;  // etag without surrounding quotes
  bool truncated = false;
  std::string next_token;  // set when truncated
};

// A ListObjectsV2 reply body; nullopt when malformed (not ListBucketResult, a Contents
// without Key or with a bad Size, IsTruncated true without NextContinuationToken).
std::optional<ListPage> ParseListPage(std::string_view document);

struct S3ErrorBody {
  std::string code;     // e.g. "NoSuchKey"
  std::string message;  // the server's human-readable message
};

// An S3 <Error> body; nullopt when the body is not one.
std::optional<S3ErrorBody> ParseErrorBody(std::string_view document);

// An S3 listing's LastModified ("2026-12-07T21:02:30.000Z": UTC, fraction optional) as seconds
// since the epoch; nullopt when it is not exactly that form or not a real date.
std::optional<uint64_t> ParseIsoUtcSeconds(std::string_view text);

// `etag` without one pair of surrounding double quotes.
std::string UnquoteEtag(std::string_view etag);

}  // namespace gpucache::cold
