#ifndef DCP_PLANNER_MARKUP_TEST_UTIL_H_
#define DCP_PLANNER_MARKUP_TEST_UTIL_H_

// Reading generated SVG and HTML with a real parser (libxml2) in tests.
// testonly.

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "gtest/gtest.h"
#include "libxml/HTMLparser.h"
#include "libxml/parser.h"
#include "libxml/tree.h"
#include "libxml/xpath.h"

namespace dcp {

/// A parsed document; null when the text is not well-formed (SVG parses as
/// strict XML: any error fails the parse).
struct MarkupDocument {
  struct Free {
    void operator()(xmlDoc* doc) const { xmlFreeDoc(doc); }
  };
  std::unique_ptr<xmlDoc, Free> doc;

  static MarkupDocument ParseXml(const std::string& text) {
    return {std::unique_ptr<xmlDoc, Free>(xmlReadMemory(
        text.data(), static_cast<int>(text.size()), "generated.svg", nullptr,
        XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING))};
  }
  static MarkupDocument ParseHtml(const std::string& text) {
    return {std::unique_ptr<xmlDoc, Free>(htmlReadMemory(
        text.data(), static_cast<int>(text.size()), "index.html", "utf-8",
        HTML_PARSE_NONET | HTML_PARSE_NOERROR | HTML_PARSE_NOWARNING))};
  }

  /// The elements an XPath expression selects (local-name() works for
  /// namespaced SVG).
  std::vector<xmlNode*> Select(const std::string& xpath) const {
    std::vector<xmlNode*> nodes;
    if (doc == nullptr) return nodes;
    xmlXPathContext* context = xmlXPathNewContext(doc.get());
    xmlXPathObject* result = xmlXPathEvalExpression(
        reinterpret_cast<const xmlChar*>(xpath.c_str()), context);
    EXPECT_NE(result, nullptr) << "bad XPath " << xpath;
    if (result != nullptr && result->nodesetval != nullptr) {
      for (int i = 0; i < result->nodesetval->nodeNr; ++i) {
        nodes.push_back(result->nodesetval->nodeTab[i]);
      }
    }
    xmlXPathFreeObject(result);
    xmlXPathFreeContext(context);
    return nodes;
  }
};

/// An attribute's value ("" when absent).
inline std::string Attribute(xmlNode* node, const char* name) {
  xmlChar* value = xmlGetProp(node, reinterpret_cast<const xmlChar*>(name));
  if (value == nullptr) return "";
  std::string text(reinterpret_cast<const char*>(value));
  xmlFree(value);
  return text;
}

/// A numeric attribute; a test failure (and NaN) when it is not a number.
inline double NumberAttribute(xmlNode* node, const char* name) {
  double value = 0;
  if (!absl::SimpleAtod(Attribute(node, name), &value)) {
    ADD_FAILURE() << "attribute " << name << " = '" << Attribute(node, name)
                  << "' is not a number";
    return std::numeric_limits<double>::quiet_NaN();
  }
  return value;
}

/// The text content of a node and its descendants.
inline std::string TextOf(xmlNode* node) {
  xmlChar* content = xmlNodeGetContent(node);
  std::string text(content == nullptr ? ""
                                      : reinterpret_cast<const char*>(content));
  xmlFree(content);
  return text;
}

}  // namespace dcp

#endif  // DCP_PLANNER_MARKUP_TEST_UTIL_H_
