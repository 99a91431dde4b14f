#ifndef DCP_COMMON_PEM_CHECK_H_
#define DCP_COMMON_PEM_CHECK_H_

// What a TLS certificate or key file holds, checked with OpenSSL before gRPC
// is given it: gRPC reports a garbage certificate only as a server that does
// not start (which reads as "port in use") or, on a client, as a planner
// that never answers (which reads as an outage).

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dcp {

/// OK when `pem` holds at least one certificate, and every PEM block in it
/// reads as one; INVALID_ARGUMENT naming `what` and `path` otherwise
/// (e.g. "the server certificate '/etc/tls/tls.crt' holds no PEM
/// certificate ...").
absl::Status CheckPemCertificates(absl::string_view what,
                                  const std::string& path,
                                  const std::string& pem);

/// OK when `key_pem` holds a private key that belongs to the first
/// certificate in `cert_pem`; INVALID_ARGUMENT naming both files otherwise.
absl::Status CheckPemKeyPair(const std::string& cert_path,
                             const std::string& cert_pem,
                             const std::string& key_path,
                             const std::string& key_pem);

/// The contents of the PEM file at `path` (a certificate or key); an
/// INVALID_ARGUMENT naming `what` and the path when it cannot be read or is
/// empty.
absl::StatusOr<std::string> ReadPemFile(absl::string_view what,
                                        const std::string& path);

/// A certificate chain and the private key of its first certificate.
struct PemKeyPair {
  std::string cert_chain;
  std::string private_key;
};

/// The PEM file `path` (ReadPemFile) holding certificates that pass
/// CheckPemCertificates; errors name `what` ("client CA") and `path`.
absl::StatusOr<std::string> ReadPemCertificates(absl::string_view what,
                                                const std::string& path);

/// The certificate chain at `cert_path` and its private key at `key_path`,
/// read and checked: certificates that OpenSSL reads
/// (CheckPemCertificates) and a key that belongs to the first
/// (CheckPemKeyPair). A file that cannot be read, or certificates that do
/// not pass, give an error naming the file and what it is (`cert_what`,
/// `key_what`: "server certificate", "server key"); a key that does not
/// read or does not belong to the certificate gives CheckPemKeyPair's error,
/// which names both paths only.
absl::StatusOr<PemKeyPair> ReadPemKeyPair(absl::string_view cert_what,
                                          const std::string& cert_path,
                                          absl::string_view key_what,
                                          const std::string& key_path);

}  // namespace dcp

#endif  // DCP_COMMON_PEM_CHECK_H_
