// The PJRT layer of a build made without pjrt_c_api.h (before scripts/setup.sh, or without
// Python): it links, and asking for PJRT is one UserError saying how to get it. No PJRT object
// can exist in such a build, so the members past the constructors are never reached.
#include "backend/pjrt/backend.h"
#include "backend/pjrt/runtime/client.h"
#include "core/error.h"

namespace lmt {

namespace {

[[noreturn]] void built_without_pjrt() {
  throw UserError(
      "lmtrain was built without PJRT support (pjrt_c_api.h was not found; run scripts/setup.sh, "
      "then configure again)");
}

}  // namespace

bool pjrt_built() {
  return false;
}
std::string resolve_pjrt_plugin_path(const std::string&) {
  built_without_pjrt();
}
const PjrtPlugin& load_pjrt_plugin(const std::string&) {
  built_without_pjrt();
}
std::string PjrtPlugin::version() const {
  built_without_pjrt();
}
void PjrtPlugin::check(PJRT_Error*, const char*) const {
  built_without_pjrt();
}

std::unique_ptr<Backend> make_pjrt_backend(const std::string&, const PjrtOptions&) {
  built_without_pjrt();
}

PjrtClient::PjrtClient(const std::string&, const PjrtClientOptions&) {
  built_without_pjrt();
}
PjrtClient::PjrtClient(const std::string&, const PjrtTarget&, const PjrtClientOptions&) {
  built_without_pjrt();
}
bool PjrtClient::deviceless() const {
  built_without_pjrt();
}
const PjrtPlugin& PjrtClient::plugin() const {
  built_without_pjrt();
}
PjrtExecutable PjrtClient::compile(const std::string&, const CompileSettings&) const {
  built_without_pjrt();
}
std::optional<DeviceMemory> PjrtClient::device_memory() const {
  built_without_pjrt();
}
PjrtBuffer PjrtClient::to_device(const void*, DType, std::vector<int64_t>,
                                 const TensorSharding&) const {
  built_without_pjrt();
}
const Mesh& PjrtClient::mesh() const {
  built_without_pjrt();
}

void PjrtBuffer::reset() noexcept {}
void PjrtBuffer::to_host(void*, size_t) const {
  built_without_pjrt();
}

PjrtExecutable& PjrtExecutable::operator=(PjrtExecutable&&) noexcept {
  return *this;
}
void PjrtExecutable::reset() noexcept {}
std::optional<CompiledMemory> PjrtExecutable::compiled_memory() const {
  built_without_pjrt();
}
std::vector<PjrtBuffer> PjrtExecutable::execute(std::span<PjrtBuffer* const>, std::span<const int>,
                                                std::span<const TensorSharding>, PjrtPendingRun*) {
  built_without_pjrt();
}

}  // namespace lmt
