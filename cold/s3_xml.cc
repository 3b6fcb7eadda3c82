#include "cold/s3_xml.h"

#include <charconv>
#include <chrono>

namespace gpucache::cold {
namespace {

constexpr int kMaxDepth = 32;

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsXmlChar(uint32_t cp) {
  return cp == 0x9 || cp == 0xA || cp == 0xD || (cp >= 0x20 && cp <= 0xD7FF) ||
         (cp >= 0xE000 && cp <= 0xFFFD) || (cp >= 0x10000 && cp <= 0x10FFFF);
}

bool DecodeEntity(std::string_view entity, std::string& out) {
  if (entity == "amp") return out.push_back('&'), true;
  if (entity == "lt") return out.push_back('<'), true;
  if (entity == "gt") return out.push_back('>'), true;
  if (entity == "quot") return out.push_back('"'), true;
  if (entity == "apos") return out.push_back('\''), true;
  if (entity.size() < 2 || entity[0] != '#') return false;
  int base = 10;
  std::string_view digits = entity.substr(1);
  if (digits[0] == 'x') {
    base = 16;
    digits.remove_prefix(1);
  }
  uint32_t cp = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), cp, base);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) return false;
  if (!IsXmlChar(cp)) return false;
  AppendUtf8(cp, out);
  return true;
}

// Recursive-descent parser over one document; `pos` only moves forward.
class Parser {
 public:
  explicit Parser(std::string_view doc) : doc_(doc) {}

  std::optional<XmlElement> Document() {
    if (!SkipMisc(true)) return std::nullopt;
    XmlElement root;
    if (!Element(root, 0)) return std::nullopt;
    if (!SkipMisc(false) || pos_ != doc_.size()) return std::nullopt;
    return root;
  }

 private:
  bool Starts(std::string_view s) const { return doc_.substr(pos_, s.size()) == s; }

  // Skips `open` ... `close`; false when unterminated.
  bool SkipPast(std::string_view close) {
    size_t end = doc_.find(close, pos_);
    if (end == std::string_view::npos) return false;
    pos_ = end + close.size();
    return true;
  }

  // Whitespace, comments and processing instructions around the root element.
  bool SkipMisc(bool before_root) {
    if (before_root && Starts("\xEF\xBB\xBF")) pos_ += 3;  // UTF-8 byte order mark
    while (pos_ < doc_.size()) {
      if (IsSpace(doc_[pos_])) {
        ++pos_;
      } else if (Starts("<?")) {
        if (!SkipPast("?>")) return false;
      } else if (Starts("<!--")) {
        if (!SkipPast("-->")) return false;
      } else {
        return !Starts("<!");  // DOCTYPE and friends are refused
      }
    }
    return true;
  }

  // At '<' of a start tag: the element, its content and its end tag.
  bool Element(XmlElement& element, int depth) {
    if (depth >= kMaxDepth || !Starts("<")) return false;
    ++pos_;
    size_t name_start = pos_;
    while (pos_ < doc_.size() && !IsSpace(doc_[pos_]) && doc_[pos_] != '/' && doc_[pos_] != '>') {
      ++pos_;
    }
    std::string_view qname = doc_.substr(name_start, pos_ - name_start);
    if (qname.empty()) return false;
    size_t colon = qname.rfind(':');
    element.name = qname.substr(colon == std::string_view::npos ? 0 : colon + 1);
    // Attributes: skipped, but quoted values may contain '>' and '/'.
    char quote = 0;
    for (; pos_ < doc_.size(); ++pos_) {
      char c = doc_[pos_];
      if (quote != 0) {
        if (c == quote) quote = 0;
      } else if (c == '"' || c == '\'') {
        quote = c;
      } else if (c == '>' || c == '/') {
        break;
      } else if (c == '<') {
        return false;
      }
    }
    if (Starts("/>")) {
      pos_ += 2;
      return true;
    }
    if (!Starts(">")) return false;
    ++pos_;
    return Content(element, qname, depth);
  }

  bool Content(XmlElement& element, std::string_view qname, int depth) {
    while (pos_ < doc_.size()) {
      if (Starts("</")) {
        pos_ += 2;
        if (doc_.substr(pos_, qname.size()) != qname) return false;
        pos_ += qname.size();
        while (pos_ < doc_.size() && IsSpace(doc_[pos_])) ++pos_;
        if (!Starts(">")) return false;
        ++pos_;
        return true;
      }
      if (Starts("<!--")) {
        if (!SkipPast("-->")) return false;
      } else if (Starts("<![CDATA[")) {
        size_t start = pos_ + 9;
        if (!SkipPast("]]>")) return false;
        element.text.append(doc_.substr(start, pos_ - 3 - start));
      } else if (Starts("<?")) {
        if (!SkipPast("?>")) return false;
      } else if (Starts("<!")) {
        return false;
      } else if (Starts("<")) {
        element.children.emplace_back();
        if (!Element(element.children.back(), depth + 1)) return false;
      } else {
        size_t end = doc_.find('<', pos_);
        if (end == std::string_view::npos) return false;
        std::optional<std::string> text = XmlDecode(doc_.substr(pos_, end - pos_));
        if (!text) return false;
        element.text += *text;
        pos_ = end;
      }
    }
    return false;  // no end tag
  }

  std::string_view doc_;
  size_t pos_ = 0;
};

std::optional<uint64_t> ParseU64(std::string_view s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string_view TrimSpace(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

const XmlElement* XmlElement::Child(std::string_view child_name) const {
  for (const XmlElement& child : children) {
    if (child.name == child_name) return &child;
  }
  return nullptr;
}

std::optional<XmlElement> ParseXml(std::string_view document) {
  return Parser(document).Document();
}

std::optional<std::string> XmlDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    size_t amp = text.find('&');
    out.append(text.substr(0, amp));
    if (amp == std::string_view::npos) break;
    size_t semi = text.find(';', amp);
    if (semi == std::string_view::npos || semi - amp > 12) return std::nullopt;
    if (!DecodeEntity(text.substr(amp + 1, semi - amp - 1), out)) return std::nullopt;
    text.remove_prefix(semi + 1);
  }
  return out;
}

std::optional<uint64_t> ParseIsoUtcSeconds(std::string_view t) {
  // YYYY-MM-DDTHH:MM:SS, then an optional fraction, then Z.
  if (t.size() < 20 || t[4] != '-' || t[7] != '-' || t[10] != 'T' || t[13] != ':' || t[16] != ':') {
    return std::nullopt;
  }
  auto field = [&](size_t at, size_t n) { return ParseU64(t.substr(at, n)); };
  auto y = field(0, 4), mo = field(5, 2), d = field(8, 2), h = field(11, 2), mi = field(14, 2),
       s = field(17, 2);
  if (!y || !mo || !d || !h || !mi || !s || *h > 23 || *mi > 59 || *s > 60) return std::nullopt;
  std::string_view rest = t.substr(19);
  if (rest.front() == '.') {
    size_t digits = rest.find_first_not_of("0123456789", 1);
    if (digits == 1 || digits == std::string_view::npos) return std::nullopt;
    rest.remove_prefix(digits);
  }
  if (rest != "Z") return std::nullopt;
  using namespace std::chrono;
  year_month_day date{year(static_cast<int>(*y)), month(static_cast<unsigned>(*mo)),
                      day(static_cast<unsigned>(*d))};
  if (!date.ok() || *y < 1970) return std::nullopt;
  return static_cast<uint64_t>(sys_days(date).time_since_epoch() / seconds(1)) + *h * 3600 +
         *mi * 60 + *s;
}

std::string UnquoteEtag(std::string_view etag) {
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  return std::string(etag);
}

std::optional<ListPage> ParseListPage(std::string_view document) {
  std::optional<XmlElement> root = ParseXml(document);
  if (!root || root->name != "ListBucketResult") return std::nullopt;
  ListPage page;
  bool says_if_truncated = false;  // a page that does not say is malformed, not the last
  for (const XmlElement& child : root->children) {
    if (child.name == "Contents") {
      const XmlElement* key = child.Child("Key");
      const XmlElement* size = child.Child("Size");
      const XmlElement* etag = child.Child("ETag");
      if (key == nullptr || key->text.empty() || size == nullptr) return std::nullopt;
      std::optional<uint64_t> bytes = ParseU64(TrimSpace(size->text));
      if (!bytes) return std::nullopt;
      const XmlElement* modified = child.Child("LastModified");
      std::optional<uint64_t> when = modified ? ParseIsoUtcSeconds(TrimSpace(modified->text)) : std::nullopt;
      page.objects.push_back(ObjectMeta{key->text, *bytes,
                                        etag ? UnquoteEtag(TrimSpace(etag->text)) : std::string(),
                                        when.value_or(0)});
    } else if (child.name == "IsTruncated") {
      std::string_view value = TrimSpace(child.text);
      if (value != "true" && value != "false") return std::nullopt;
      page.truncated = value == "true";
      says_if_truncated = true;
    } else if (child.name == "NextContinuationToken") {
      page.next_token = child.text;
    }
  }
  if (!says_if_truncated || (page.truncated && page.next_token.empty())) return std::nullopt;
  if (!page.truncated) page.next_token.clear();
  return page;
}

std::optional<S3ErrorBody> ParseErrorBody(std::string_view document) {
  std::optional<XmlElement> root = ParseXml(document);
  if (!root || root->name != "Error") return std::nullopt;
  S3ErrorBody body;
  if (const XmlElement* code = root->Child("Code")) body.code = TrimSpace(code->text);
  if (const XmlElement* message = root->Child("Message")) body.message = message->text;
  return body;
}

}  // namespace gpucache::cold
