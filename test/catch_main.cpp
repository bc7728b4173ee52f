// The one Catch2 (v2) main for all CPU tests; compiled once.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
