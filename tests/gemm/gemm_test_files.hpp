// Small weight files the gemm tests write: a safetensors file of float32 matrices.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

namespace gemm_test {

/// A safetensors file of float32 matrices (name, rows, cols, row-major values).
inline void write_safetensors(const std::filesystem::path& file,
                              const std::vector<std::tuple<std::string, int, int, std::vector<float>>>& tensors) {
  std::string header = "{", data;
  for (const auto& [name, rows, cols, values] : tensors) {
    const std::size_t begin = data.size();
    data.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
    if (header.size() > 1) header += ",";
    header += "\"" + name + "\": {\"dtype\": \"F32\", \"shape\": [" + std::to_string(rows) + ", " + std::to_string(cols) +
              "], \"data_offsets\": [" + std::to_string(begin) + ", " + std::to_string(data.size()) + "]}";
  }
  header += "}";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  std::ofstream(file, std::ios::binary) << bytes << header << data;
}

}  // namespace gemm_test
