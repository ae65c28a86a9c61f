#include "src/bootstrap/wire.h"

#include "transport/socket/net.h"

namespace sketchccl::bootstrap::wire {
namespace net = transport::net;

namespace {

void put_header(std::vector<uint8_t>* out, uint16_t type) {
  out->resize(kFrameBytes + 8);
  net::put_u32(out->data() + 4, kMagic);
  net::put_u16(out->data() + 8, kVersion);
  net::put_u16(out->data() + 10, type);
}

void append_u32(std::vector<uint8_t>* out, uint32_t v) {
  size_t n = out->size();
  out->resize(n + 4);
  net::put_u32(out->data() + n, v);
}

void append_u64(std::vector<uint8_t>* out, uint64_t v) {
  size_t n = out->size();
  out->resize(n + 8);
  net::put_u64(out->data() + n, v);
}

void finish(std::vector<uint8_t>* out) {
  net::put_u32(out->data(), static_cast<uint32_t>(out->size() - kFrameBytes));
}

// A bounds-checked reader.
struct Reader {
  const uint8_t* p;
  size_t left;
  bool u16(uint16_t* v) {
    if (left < 2) return false;
    *v = net::get_u16(p);
    p += 2;
    left -= 2;
    return true;
  }
  bool u32(uint32_t* v) {
    if (left < 4) return false;
    *v = net::get_u32(p);
    p += 4;
    left -= 4;
    return true;
  }
  bool u64(uint64_t* v) {
    if (left < 8) return false;
    *v = net::get_u64(p);
    p += 8;
    left -= 8;
    return true;
  }
  bool bytes(size_t n, std::vector<uint8_t>* v) {
    if (left < n) return false;
    v->assign(p, p + n);
    p += n;
    left -= n;
    return true;
  }
};

Status check_header(Reader* r, size_t len, uint16_t* type) {
  uint32_t magic = 0;
  uint16_t version = 0;
  if (!r->u32(&magic) || !r->u16(&version) || !r->u16(type)) {
    return errorf(Code::kInvalidArgument, "truncated bootstrap message (%zu bytes)", len);
  }
  if (magic != kMagic) {
    return errorf(Code::kInvalidArgument,
                  "not a SketchCCL bootstrap message (magic 0x%08x instead of 0x%08x)", magic,
                  kMagic);
  }
  if (version != kVersion) {
    return errorf(Code::kInvalidArgument,
                  "bootstrap protocol version %u, this build speaks %u (mixed SketchCCL versions?)",
                  version, kVersion);
  }
  return Status::Ok();
}

// The checks every message starts with: a body of at most `max_bytes`, then magic, version and
// type. `what` names the message ("hello", "reply") in the errors.
Status open_message(const uint8_t* data, size_t len, size_t max_bytes, const char* what, Reader* r,
                    uint16_t* type) {
  if (data == nullptr && len != 0) return errorf(Code::kInvalidArgument, "null bootstrap message");
  if (len > max_bytes) {
    return errorf(Code::kInvalidArgument, "bootstrap %s of %zu bytes exceeds the limit of %zu",
                  what, len, max_bytes);
  }
  *r = Reader{data, len};
  return check_header(r, len, type);
}

}  // namespace

std::vector<uint8_t> encode_hello(const Hello& h) {
  std::vector<uint8_t> out;
  put_header(&out, h.abandon ? kTypeAbandon : kTypeHello);
  append_u64(&out, h.secret);
  append_u32(&out, h.rank);
  append_u32(&out, h.nranks);
  append_u64(&out, h.config_hash);
  append_u32(&out, static_cast<uint32_t>(h.blob.size()));
  out.insert(out.end(), h.blob.begin(), h.blob.end());
  finish(&out);
  return out;
}

std::vector<uint8_t> encode_table(const std::vector<std::vector<uint8_t>>& blobs,
                                  const std::vector<uint64_t>& config_hashes) {
  std::vector<uint8_t> out;
  put_header(&out, kTypeTable);
  append_u32(&out, static_cast<uint32_t>(blobs.size()));
  for (size_t i = 0; i < blobs.size(); ++i) {
    append_u64(&out, i < config_hashes.size() ? config_hashes[i] : 0);
    append_u32(&out, static_cast<uint32_t>(blobs[i].size()));
    out.insert(out.end(), blobs[i].begin(), blobs[i].end());
  }
  finish(&out);
  return out;
}

std::vector<uint8_t> encode_error(const std::string& message) {
  std::string m = message.substr(0, kMaxErrorBytes);
  std::vector<uint8_t> out;
  put_header(&out, kTypeError);
  append_u32(&out, static_cast<uint32_t>(m.size()));
  out.insert(out.end(), m.begin(), m.end());
  finish(&out);
  return out;
}

Status parse_hello(const uint8_t* data, size_t len, Hello* out) {
  Reader r{data, len};
  uint16_t type = 0;
  SCCL_RETURN_IF_ERROR(open_message(data, len, kMaxHelloBytes, "hello", &r, &type));
  if (type != kTypeHello && type != kTypeAbandon) {
    return errorf(Code::kInvalidArgument, "bootstrap message of type %u where a hello (%u) belongs",
                  type, kTypeHello);
  }
  Hello h;
  h.abandon = type == kTypeAbandon;
  uint32_t blob_len = 0;
  if (!r.u64(&h.secret) || !r.u32(&h.rank) || !r.u32(&h.nranks) || !r.u64(&h.config_hash) ||
      !r.u32(&blob_len)) {
    return errorf(Code::kInvalidArgument, "truncated bootstrap hello (%zu bytes)", len);
  }
  if (h.nranks == 0 || h.nranks > kMaxRanks) {
    return errorf(Code::kInvalidArgument, "bootstrap hello with a rank count of %u (1 to %u)",
                  h.nranks, kMaxRanks);
  }
  if (blob_len > kMaxBlobBytes) {
    return errorf(Code::kInvalidArgument,
                  "bootstrap hello with a transport address of %u bytes (limit %zu)", blob_len,
                  kMaxBlobBytes);
  }
  if (!r.bytes(blob_len, &h.blob)) {
    return errorf(Code::kInvalidArgument,
                  "truncated bootstrap hello: the transport address needs %u bytes, %zu remain",
                  blob_len, r.left);
  }
  if (r.left != 0) {
    return errorf(Code::kInvalidArgument, "bootstrap hello with %zu trailing bytes", r.left);
  }
  *out = std::move(h);
  return Status::Ok();
}

Status parse_reply(const uint8_t* data, size_t len, Reply* out) {
  Reader r{data, len};
  uint16_t type = 0;
  SCCL_RETURN_IF_ERROR(open_message(data, len, kMaxReplyBytes, "reply", &r, &type));
  Reply rep;
  if (type == kTypeError) {
    uint32_t n = 0;
    std::vector<uint8_t> text;
    if (!r.u32(&n) || n > kMaxErrorBytes || !r.bytes(n, &text) || r.left != 0) {
      return errorf(Code::kInvalidArgument, "malformed bootstrap error reply (%zu bytes)", len);
    }
    rep.ok = false;
    rep.error.assign(text.begin(), text.end());
    *out = std::move(rep);
    return Status::Ok();
  }
  if (type != kTypeTable) {
    return errorf(Code::kInvalidArgument, "bootstrap reply of unknown type %u", type);
  }
  uint32_t nranks = 0;
  if (!r.u32(&nranks)) return errorf(Code::kInvalidArgument, "truncated bootstrap table");
  if (nranks == 0 || nranks > kMaxRanks || nranks > r.left / 12) {
    return errorf(Code::kInvalidArgument,
                  "bootstrap table claims %u ranks in %zu bytes (malformed or truncated)", nranks,
                  r.left);
  }
  rep.ok = true;
  rep.blobs.resize(nranks);
  rep.config_hashes.resize(nranks);
  for (uint32_t i = 0; i < nranks; ++i) {
    uint32_t blob_len = 0;
    if (!r.u64(&rep.config_hashes[i]) || !r.u32(&blob_len) || blob_len > kMaxBlobBytes ||
        !r.bytes(blob_len, &rep.blobs[i])) {
      return errorf(Code::kInvalidArgument, "truncated or malformed bootstrap table at rank %u", i);
    }
  }
  if (r.left != 0) {
    return errorf(Code::kInvalidArgument, "bootstrap table with %zu trailing bytes", r.left);
  }
  *out = std::move(rep);
  return Status::Ok();
}

}  // namespace sketchccl::bootstrap::wire
