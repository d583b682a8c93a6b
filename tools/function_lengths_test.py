"""Tests of tools/function_lengths.py (run: python3 -m unittest function_lengths_test)."""
import pathlib
import tempfile
import unittest

import function_lengths


def body(n):
    return ''.join(f'  x += {i};\n' for i in range(n))


class LongFunctions(unittest.TestCase):
    def scan(self, text, limit=10):
        with tempfile.TemporaryDirectory() as d:
            f = pathlib.Path(d) / 'a.cc'
            f.write_text(text)
            return [(line, length, name) for line, length, name in
                    function_lengths.long_functions(f, limit)]

    def test_table(self):
        cases = [
            ('a function at the limit is fine', 'int F() {\n' + body(8) + '}\n', []),
            ('one over is reported', 'int F() {\n' + body(9) + '}\n', [(1, 11, 'F')]),
            ('inside a namespace and a class',
             'namespace n {\nclass C {\n void M(int a) const {\n' + body(9) + ' }\n};\n}\n',
             [(3, 11, 'M')]),
            ('lambdas and blocks count toward their function',
             'void F() {\n auto f = [] {\n' + body(4) + ' };\n if (1) {\n' + body(4) + ' }\n}\n',
             [(1, 14, 'F')]),
            ('braces in strings, chars and comments are ignored',
             'void F() {\n s = "{{{";\n c = \'{\';\n // {\n /* { */\n}\n' + 'int x = 1\'000;\n',
             []),
            ('a raw string with braces', 'void F() {\n s = R"x({ ) })x";\n}\n', []),
            ('brace initialisers at namespace scope are not functions',
             'const int kA[] = {\n' + '1,\n' * 20 + '};\n', []),
            ('a long struct is not a function', 'struct S {\n' + 'int a;\n' * 20 + '};\n', []),
            ('a gtest TEST is a function', 'TEST(A, B) {\n' + body(9) + '}\n', [(1, 11, 'TEST')]),
        ]
        for what, text, want in cases:
            with self.subTest(what):
                self.assertEqual(self.scan(text), want)


if __name__ == '__main__':
    unittest.main()
