#include "common/pem_check.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dcp {
namespace {

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* x509) const { X509_free(x509); }
};
struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Certificate = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;

Bio ReadOnlyBio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

/// OpenSSL's last error as text, and the error queue cleared.
std::string LastOpenSslError() {
  const unsigned long code = ERR_peek_last_error();
  ERR_clear_error();
  if (code == 0) return "no PEM block";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

}  // namespace

absl::Status CheckPemCertificates(absl::string_view what,
                                  const std::string& path,
                                  const std::string& pem) {
  const int blocks = [&] {
    int count = 0;
    for (size_t at = pem.find("-----BEGIN "); at != std::string::npos;
         at = pem.find("-----BEGIN ", at + 1)) {
      ++count;
    }
    return count;
  }();
  ERR_clear_error();
  Bio bio = ReadOnlyBio(pem);
  int certificates = 0;
  while (Certificate certificate{
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)}) {
    ++certificates;
  }
  ERR_clear_error();  // the read past the last certificate
  if (certificates == 0 || certificates != blocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", what, " '", path, "' ",
        certificates == 0 ? "holds no PEM certificate that OpenSSL can read"
                          : absl::StrCat("has ", blocks, " PEM blocks of which "
                                         "only ", certificates,
                                         " read as certificates"),
        "; give a PEM file of '-----BEGIN CERTIFICATE-----' blocks (e.g. the "
        "tls.crt or ca.crt of a Kubernetes TLS Secret)"));
  }
  return absl::OkStatus();
}

absl::Status CheckPemKeyPair(const std::string& cert_path,
                             const std::string& cert_pem,
                             const std::string& key_path,
                             const std::string& key_pem) {
  ERR_clear_error();
  Bio cert_bio = ReadOnlyBio(cert_pem);
  Certificate certificate{
      PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr)};
  if (certificate == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("the certificate '", cert_path,
                     "' holds no PEM certificate that OpenSSL can read: ",
                     LastOpenSslError()));
  }
  Bio key_bio = ReadOnlyBio(key_pem);
  Key key{PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr)};
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the key '", key_path,
        "' holds no unencrypted PEM private key that OpenSSL can read (",
        LastOpenSslError(),
        "); give the '-----BEGIN PRIVATE KEY-----' file made with the "
        "certificate (e.g. the tls.key of a Kubernetes TLS Secret)"));
  }
  if (X509_check_private_key(certificate.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat("the key '", key_path,
                     "' does not belong to the certificate '", cert_path,
                     "'; give the key the certificate was made for"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadPemFile(absl::string_view what,
                                        const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the ", what, " PEM file '", path, "'"));
  }
  std::ostringstream contents;
  contents << file.rdbuf();
  if (contents.str().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", what, " PEM file '", path, "' is empty"));
  }
  return contents.str();
}

absl::StatusOr<std::string> ReadPemCertificates(absl::string_view what,
                                                const std::string& path) {
  DCP_ASSIGN_OR_RETURN(std::string pem, ReadPemFile(what, path));
  DCP_RETURN_IF_ERROR(CheckPemCertificates(what, path, pem));
  return pem;
}

absl::StatusOr<PemKeyPair> ReadPemKeyPair(absl::string_view cert_what,
                                          const std::string& cert_path,
                                          absl::string_view key_what,
                                          const std::string& key_path) {
  DCP_ASSIGN_OR_RETURN(std::string cert, ReadPemFile(cert_what, cert_path));
  DCP_ASSIGN_OR_RETURN(std::string key, ReadPemFile(key_what, key_path));
  DCP_RETURN_IF_ERROR(CheckPemCertificates(cert_what, cert_path, cert));
  DCP_RETURN_IF_ERROR(CheckPemKeyPair(cert_path, cert, key_path, key));
  return PemKeyPair{std::move(cert), std::move(key)};
}

}  // namespace dcp
