#include "transport/transport.h"

#include "sketchccl_build_config.h"
#include "src/core/config.h"
#include "src/core/log.h"
#include "transport/socket/socket_transport.h"
#if SKETCHCCL_HAVE_UCX
#include "transport/ucx/ucx_transport.h"
#endif

namespace sketchccl::transport {

// create_transport below handles exactly these kinds.
static_assert(var_accepted(Var::kTransport) == "auto|ucx|socket",
              "SKETCHCCL_TRANSPORT accepts a kind that create_transport does not handle");

TransportOptions::TransportOptions(const Config& cfg)
    : kind(cfg.get_string(Var::kTransport)),
      timeout_s(cfg.get_double(Var::kTimeout)),
      ifname(cfg.get_string(Var::kSocketIfname)),
      max_unexpected_bytes(cfg.get_size(Var::kSocketBufferLimit)),
      wait(cfg.get_string(Var::kWait)) {}

TransportOptions TransportOptions::from_config(int rank, int nranks) {
  TransportOptions o(Config::global());
  o.rank = rank;
  o.nranks = nranks;
  return o;
}

Status create_transport(const TransportOptions& opts, std::unique_ptr<Transport>* out) {
  if (out == nullptr) return errorf(Code::kInvalidArgument, "create_transport: null output");
  if (!(opts.timeout_s > 0)) {
    return errorf(Code::kInvalidArgument, "transport timeout must be positive, got %g",
                  opts.timeout_s);
  }
  const std::string& kind = opts.kind;
  if (kind == "socket") return create_socket_transport(opts, out);
  if (kind == "ucx" || kind == "auto") {
#if SKETCHCCL_HAVE_UCX
    Status st = create_ucx_transport(opts, out);
    if (st.ok() || kind == "ucx") return st;
    SCCL_INFO(kLogNet, "SKETCHCCL_TRANSPORT=auto: UCX unusable (%s); using the socket transport",
              st.message().c_str());
#else
    if (kind == "ucx") {
      return errorf(Code::kInvalidArgument,
                    "SKETCHCCL_TRANSPORT=ucx: the UCX transport is not built (configure with "
                    "-Ducx=enabled and libucx-dev)");
    }
#endif
    return create_socket_transport(opts, out);
  }
  return errorf(Code::kInvalidArgument,
                "SKETCHCCL_TRANSPORT='%s' is not a transport (accepted: %s)", kind.c_str(),
                var_spec(Var::kTransport).accepted);
}

}  // namespace sketchccl::transport
