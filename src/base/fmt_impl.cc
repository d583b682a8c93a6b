// {fmt}'s compiled part, built into stallscope instead of linking libfmt.so (Debian ships no
// libfmt.a). Why: libfmt.so needs libstdc++.so, and `stallscope record` must not load it (its
// process stays under 4 MB, README.md "Two binaries"). The header-only mode would compile
// this in every file that includes <fmt/format.h> (~4 s each); here it is compiled once.
// fmt/format-inl.h defines the non-template functions; the templates that the library
// instantiates for char are instantiated below, as the library's own build does.
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {

template auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;

template locale_ref::locale_ref(const std::locale& loc);
template auto locale_ref::get<std::locale>() const -> std::locale;

template auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template auto decimal_point_impl(locale_ref) -> char;
template void buffer<char>::append(const char*, const char*);
template void vformat_to(buffer<char>&, string_view, basic_format_args<FMT_BUFFER_CONTEXT(char)>,
                         locale_ref);

}  // namespace detail
FMT_END_NAMESPACE
