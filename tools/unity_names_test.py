"""Tests of tools/unity_names.py on small source trees."""

import os
import tempfile
import textwrap
import unittest

import unity_names


class UnityNamesTest(unittest.TestCase):
    def tree(self, files):
        root = tempfile.mkdtemp(prefix="unity-names-")
        self.addCleanup(__import__("shutil").rmtree, root, True)
        for rel, text in files.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(textwrap.dedent(text))
        return root

    def names(self, files):
        return [(module, name) for module, name, _ in unity_names.clashes(self.tree(files))]

    def test_the_same_helper_in_two_files_of_a_module(self):
        local = "namespace a {\nnamespace {\n\nstd::string Dur(double s) {\n  return {};\n}\n\n}  // namespace\n}  // namespace a\n"
        other = local.replace("double s", "int64_t ns")
        self.assertEqual(self.names({"m/a.cc": local, "m/b.cc": other}), [("m", "Dur")])

    def test_static_and_objects_and_types(self):
        a = "static int Count(int x) { return x; }\nnamespace {\nconstexpr int kMax = 1;\nstruct Row {\n  int x;\n};\n}  // namespace\n"
        self.assertEqual(self.names({"m/a.cc": a, "m/b.cc": a}),
                         [("m", "Count"), ("m", "Row"), ("m", "kMax")])

    def test_a_local_name_the_modules_header_declares(self):
        header = "namespace a {\n[[nodiscard]] std::vector<double> StepSeconds(const Rank& r);\n}  // namespace a\n"
        local = "namespace a {\nnamespace {\ndouble StepSeconds(const Step& s) { return 0; }\n}  // namespace\n}  // namespace a\n"
        self.assertEqual(self.names({"m/a.h": header, "m/a.cc": local}), [("m", "StepSeconds")])

    def test_what_merges_nothing(self):
        alias = "namespace {\nusing S = CheckStatus;\nnamespace fs = std::filesystem;\n}  // namespace\n"
        public = "namespace a {\nint Shared(int x) { return x; }\n}  // namespace a\n"
        test = "namespace {\nint Helper() { return 1; }\n}  // namespace\n"
        self.assertEqual(self.names({"m/a.cc": alias + public, "m/b.cc": alias + public,
                                     "m/a_test.cc": test, "m/b_test.cc": test,
                                     "n/a.cc": test}), [])

    def test_test_sources_apart(self):
        test = "namespace {\nint Helper() { return 1; }\n}  // namespace\n"
        root = self.tree({"m/a_test.cc": test, "m/b_test.cc": test, "m/c.cc": test})
        self.assertEqual([n for _, n, _ in unity_names.clashes(root, tests=True)], ["Helper"])
        self.assertEqual(unity_names.clashes(root), [])

    def test_indented_code_is_not_file_scope(self):
        a = "namespace {\nvoid F() {\n  int Local(int);\n}\n}  // namespace\n"
        b = "namespace {\nvoid G() {\n  int Local(int);\n}\n}  // namespace\n"
        self.assertEqual(self.names({"m/a.cc": a, "m/b.cc": b}), [])


if __name__ == "__main__":
    unittest.main()
