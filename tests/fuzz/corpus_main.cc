// corpus_main.cc: runs LLVMFuzzerTestOneInput over every file of the seed
// corpus, so the corpus is a regression test in ordinary (gcc, asan, tsan)
// builds; scripts/fuzz links the same target with libFuzzer instead.
// Usage: c_api_fuzzer_corpus_test [DIR...] (default: tests/fuzz/corpus).
#include <dirent.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) dirs.push_back(argv[i]);
  if (dirs.empty()) dirs.push_back("tests/fuzz/corpus");
  int inputs = 0;
  for (const std::string& dir : dirs) {
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) {
      std::fprintf(stderr, "corpus directory %s not found\n", dir.c_str());
      return 1;
    }
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream in(dir + "/" + e->d_name, std::ios::binary);
      std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++inputs;
    }
    closedir(d);
  }
  std::printf("RELIABILITY fuzz_corpus inputs=%d\n", inputs);
  return inputs > 0 ? 0 : 1;
}
