// NumPy .npy files (format version 1.0) of float32 arrays: a small writer for the trainer's
// dumps (--dump-attention) and a reader for the tests. Host-only, no GPU needed.
//
// Layout (numpy.lib.format, version 1.0):
//   bytes 0..5   magic "\x93NUMPY"
//   bytes 6, 7   major 1, minor 0
//   bytes 8, 9   HEADER_LEN, uint16 little-endian
//   HEADER_LEN   ASCII dict "{'descr': '<f4', 'fortran_order': False, 'shape': (d0, d1, ...), }",
//                padded with spaces and ended by '\n' so that 10 + HEADER_LEN is a multiple of 64
//   then         the data: little-endian float32, C order (last index fastest), prod(shape) values
// np.load reads it as dtype float32 with the given shape.
#pragma once
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "llmc/io/atomic_file.h"
#include "llmc/core/error.h"

namespace llmc {

// "(3, 4)", "(5,)", "()": Python's tuple repr, as numpy writes the shape.
inline std::string npy_shape_repr(const std::vector<size_t>& shape) {
    std::string s = "(";
    for (size_t i = 0; i < shape.size(); i++) {
        if (i > 0) s += ", ";
        s += std::to_string(shape[i]);
    }
    if (shape.size() == 1) s += ",";
    return s + ")";
}

// The 10-byte preamble plus the padded header dict of a '<f4' C-order array; its size is a
// multiple of 64.
inline std::string npy_header_f32(const std::vector<size_t>& shape) {
    std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + npy_shape_repr(shape) + ", }";
    const size_t unpadded = 10 + dict.size() + 1;  // + '\n'
    dict.append((64 - unpadded % 64) % 64, ' ');
    dict += '\n';
    if (dict.size() > 65535)
        throw InputError("npy: shape " + npy_shape_repr(shape) + " is too long for a version 1.0 header");
    std::string out("\x93NUMPY\x01\x00", 8);
    out += (char)(dict.size() & 0xff);
    out += (char)(dict.size() >> 8);
    return out + dict;
}

inline bool host_is_little_endian() {
    const uint16_t one = 1;
    unsigned char b;
    std::memcpy(&b, &one, 1);
    return b == 1;
}

// The whole .npy file of data (prod(shape) floats, C order) as bytes.
inline std::string npy_bytes_f32(const float* data, const std::vector<size_t>& shape) {
    size_t n = 1;
    for (size_t d : shape) n *= d;
    std::string out = npy_header_f32(shape);
    const size_t start = out.size();
    out.resize(start + n * sizeof(float));
    std::memcpy(&out[start], data, n * sizeof(float));
    if (!host_is_little_endian())  // '<f4': swap each value's bytes on a big-endian host
        for (size_t i = 0; i < n; i++) {
            char* p = &out[start + i * 4];
            std::swap(p[0], p[3]);
            std::swap(p[1], p[2]);
        }
    return out;
}

// Writes a float32 .npy file atomically (llmc/io/atomic_file.h): a failed write leaves any existing
// file at path unchanged.
inline void write_npy_f32(const std::string& path, const float* data, const std::vector<size_t>& shape) {
    const std::string bytes = npy_bytes_f32(data, shape);
    write_file_atomic(path, bytes.data(), bytes.size());
}

struct NpyArrayF32 {
    std::vector<size_t> shape;
    std::vector<float> data;  // C order
};

// Reads a '<f4' C-order .npy file (format version 1.0 or 2.0). Anything else (another dtype,
// Fortran order, a short file) is refused with an InputError naming the file.
inline NpyArrayF32 read_npy_f32(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError("npy: cannot open " + path);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto fail = [&](const std::string& why) -> NpyArrayF32 { throw InputError("npy: " + path + ": " + why); };
    if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY", 6) != 0)
        return fail("not a .npy file (no \\x93NUMPY magic)");
    const int major = (unsigned char)bytes[6];
    size_t hlen, pos;
    if (major == 1) {
        hlen = (unsigned char)bytes[8] | ((size_t)(unsigned char)bytes[9] << 8);
        pos = 10;
    } else if (major == 2 && bytes.size() >= 12) {
        hlen = 0;
        for (int i = 3; i >= 0; i--) hlen = (hlen << 8) | (unsigned char)bytes[8 + i];
        pos = 12;
    } else {
        return fail("unsupported format version " + std::to_string(major));
    }
    if (bytes.size() < pos + hlen) return fail("header is cut short");
    const std::string h = bytes.substr(pos, hlen);
    pos += hlen;
    if (h.find("'descr': '<f4'") == std::string::npos) return fail("dtype is not '<f4' (little-endian float32)");
    if (h.find("'fortran_order': False") == std::string::npos) return fail("not in C order");
    const size_t s0 = h.find("'shape': (");
    const size_t s1 = s0 == std::string::npos ? s0 : h.find(')', s0);
    if (s1 == std::string::npos) return fail("header has no shape");
    NpyArrayF32 a;
    size_t n = 1;
    const std::string dims = h.substr(s0 + 10, s1 - (s0 + 10));
    size_t i = 0;
    while (i < dims.size()) {
        while (i < dims.size() && (dims[i] == ' ' || dims[i] == ',')) i++;
        if (i == dims.size()) break;
        size_t j = i, d = 0;
        while (j < dims.size() && dims[j] >= '0' && dims[j] <= '9') d = d * 10 + (size_t)(dims[j++] - '0');
        if (j == i) return fail("malformed shape (" + dims + ")");
        a.shape.push_back(d);
        n *= d;
        i = j;
    }
    if (bytes.size() != pos + n * sizeof(float))
        return fail("data size " + std::to_string(bytes.size() - pos) + " bytes does not match the shape " +
                    npy_shape_repr(a.shape));
    a.data.resize(n);
    if (n > 0) std::memcpy(a.data.data(), bytes.data() + pos, n * sizeof(float));  // (0, ...): data() may be null
    if (!host_is_little_endian())
        for (float& v : a.data) {
            char* p = reinterpret_cast<char*>(&v);
            std::swap(p[0], p[3]);
            std::swap(p[1], p[2]);
        }
    return a;
}

}  // namespace llmc
