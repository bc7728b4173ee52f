// Device emulation, how a kernel is named: by its symbol in the executable (the program links with
// -rdynamic), so a kernel needs external linkage to be named.
#pragma once
#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace llmc::emu {

// The kernel's mangled symbol (dladdr; the program links with -rdynamic), "" when it has none.
inline std::string kernel_symbol(const void* fn) {
    Dl_info info;
    return dladdr(fn, &info) && info.dli_sname ? info.dli_sname : "";
}

// The kernel's name from the executable's symbol table (link with -rdynamic), demangled.
inline std::string kernel_name(const void* fn) {
    Dl_info info;
    if (dladdr(fn, &info) && info.dli_sname) {
        int status = 0;
        char* d = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
        std::string s = status == 0 && d ? d : info.dli_sname;
        std::free(d);
        return s;
    }
    char b[32];
    std::snprintf(b, sizeof b, "kernel@%p", fn);
    return b;
}

}  // namespace llmc::emu
