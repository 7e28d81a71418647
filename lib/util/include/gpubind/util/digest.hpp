// A 64-bit digest of content: what tells two pieces of content apart where
// something else (a file's owner and mode, a full comparison) is the
// authentication. Eight bytes at a time, each word mixed in as MurmurHash3's
// 64-bit body does, each piece's length first (so "ab","c" and "a","bc"
// differ), finished with its finaliser.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace gpubind::util {

class Digest {
  public:
    Digest& add(std::string_view data) {
        word(data.size());
        while (data.size() >= 8) {
            std::uint64_t w = 0;
            std::memcpy(&w, data.data(), 8);
            word(w);
            data.remove_prefix(8);
        }
        if (!data.empty()) {
            std::uint64_t w = 0;
            std::memcpy(&w, data.data(), data.size());
            word(w);
        }
        return *this;
    }
    Digest& add(std::uint64_t v) {
        word(v);
        return *this;
    }
    std::uint64_t value() const {
        std::uint64_t h = h_;
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
        h *= 0xc4ceb9fe1a85ec53ull;
        h ^= h >> 33;
        return h;
    }

  private:
    void word(std::uint64_t k) {
        k *= 0x87c37b91114253d5ull;
        k = std::rotl(k, 31);
        k *= 0x4cf5ad432745937full;
        h_ ^= k;
        h_ = std::rotl(h_, 27) * 5 + 0x52dce729;
    }
    std::uint64_t h_ = 0x9e3779b97f4a7c15ull;
};

inline std::uint64_t digest(std::string_view data) {
    return Digest().add(data).value();
}

}  // namespace gpubind::util
