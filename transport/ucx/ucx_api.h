// UCX, opened with dlopen on first use rather than linked: a node without UCX still starts every
// process that preloads SketchCCL, and nothing of UCX (its signal handlers, memory hooks) runs
// until a communicator asks for the UCX transport. The code compiles against UCX's headers and
// calls through this table of pointers, one per function used, named after it.
#pragma once

#include <ucp/api/ucp.h>
#include <ucs/config/global_opts.h>
#include <ucs/debug/log_def.h>

#include <string>

namespace sketchccl::transport {

struct UcxApi {
  decltype(&::ucp_get_version) ucp_get_version = nullptr;
  decltype(&::ucp_config_read) ucp_config_read = nullptr;
  decltype(&::ucp_config_release) ucp_config_release = nullptr;
  decltype(&::ucp_config_modify) ucp_config_modify = nullptr;
  decltype(&::ucp_init_version) ucp_init_version = nullptr;  // ucp_init is an inline wrapper
  decltype(&::ucp_cleanup) ucp_cleanup = nullptr;
  decltype(&::ucp_worker_create) ucp_worker_create = nullptr;
  decltype(&::ucp_worker_destroy) ucp_worker_destroy = nullptr;
  decltype(&::ucp_worker_get_address) ucp_worker_get_address = nullptr;
  decltype(&::ucp_worker_release_address) ucp_worker_release_address = nullptr;
  decltype(&::ucp_worker_progress) ucp_worker_progress = nullptr;
  decltype(&::ucp_ep_create) ucp_ep_create = nullptr;
  decltype(&::ucp_ep_close_nbx) ucp_ep_close_nbx = nullptr;
  decltype(&::ucp_ep_print_info) ucp_ep_print_info = nullptr;
  decltype(&::ucp_tag_send_nbx) ucp_tag_send_nbx = nullptr;
  decltype(&::ucp_tag_recv_nbx) ucp_tag_recv_nbx = nullptr;
  decltype(&::ucp_tag_probe_nb) ucp_tag_probe_nb = nullptr;
  decltype(&::ucp_request_check_status) ucp_request_check_status = nullptr;
  decltype(&::ucp_request_cancel) ucp_request_cancel = nullptr;
  decltype(&::ucp_request_free) ucp_request_free = nullptr;
  decltype(&::ucs_status_string) ucs_status_string = nullptr;
  decltype(&::ucs_log_push_handler) ucs_log_push_handler = nullptr;
  ucs_global_opts_t* global_opts = nullptr;  // UCX's process-wide options (its log level)
  std::string path;                          // the libucp loaded
};

// Opens libucp.so.0 once (the loader's search path, then the UCX this library was configured
// with), resolves every entry and routes UCX's log lines to SketchCCL's log. Returns the table,
// or nullptr with why in *error (UCX absent, unreadable or lacking a function); later calls
// return the same answer without trying again.
const UcxApi* load_ucx_api(std::string* error);

}  // namespace sketchccl::transport
