// toml++'s implementation (parser, printers), compiled once for the project:
// every other file includes toml.hpp for declarations only.
#define TOML_IMPLEMENTATION
#include "gpubind/util/toml.hpp"
