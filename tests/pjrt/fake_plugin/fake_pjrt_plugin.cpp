// A library that exports GetPjrtApi and nothing else, for the tests of lmtrain's version
// refusal: it reports the C API version in $LMT_FAKE_PJRT_VERSION ("major.minor"). Loading it
// must stop at the version check, before any PJRT function (all null here) is called.
#include <cstdio>
#include <cstdlib>

#include "pjrt_c_api.h"

extern "C" const PJRT_Api* GetPjrtApi() {
  static PJRT_Api api{};
  api.struct_size = PJRT_Api_STRUCT_SIZE;
  api.pjrt_api_version.struct_size = PJRT_Api_Version_STRUCT_SIZE;
  api.pjrt_api_version.major_version = PJRT_API_MAJOR;
  api.pjrt_api_version.minor_version = PJRT_API_MINOR;
  if (const char* v = std::getenv("LMT_FAKE_PJRT_VERSION")) {
    std::sscanf(v, "%d.%d", &api.pjrt_api_version.major_version,
                &api.pjrt_api_version.minor_version);
  }
  return &api;
}
