// The source of the targets that compile the tests' precompiled headers once per build
// (CMakeLists.txt, stallscope_test_pch); gtest_main gives them a main. Never run.
