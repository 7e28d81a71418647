// The translation unit that carries the tests' shared precompiled header
// (gpubind_test_pch in tests/CMakeLists.txt); it defines nothing.
