#include "proto/resp.hpp"

#include <algorithm>
#include <charconv>

#include "proto/bytes.hpp"

#include <fmt/format.h>

namespace pt2cache::proto::resp {

namespace {

// Parses a signed decimal as Redis's string2ll does: no sign-less garbage,
// no leading '+', no spaces, no leading zeros ("0" itself aside, "-0" is
// refused too). Without leading zeros a valid number has at most 20
// characters, so a length line does not parse differently when it arrives
// whole than when it arrives in pieces (where a long one is refused early).
bool parse_int(std::string_view text, std::int64_t& value) {
    const std::string_view digits = text.starts_with('-') ? text.substr(1) : text;
    if (digits.empty() || digits.front() < '0' || digits.front() > '9' ||
        (digits.front() == '0' && text.size() != 1)) {
        return false;
    }
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    return ec == std::errc() && end == text.data() + text.size();
}

// Position of "\r\n" at or after `from`, or npos.
std::size_t find_crlf(std::string_view text, std::size_t from) {
    return text.find("\r\n", from);
}

// The common length line, "<digits>\r\n" at `from` with 1 to 18 digits and
// no leading zero (so no overflow): its value, and the position of its "\r".
// Anything else (a sign, a long number, a line not complete yet, garbage)
// returns false, and the caller takes the general path (find_crlf and
// parse_int), which decides exactly as it always did.
bool quick_line_int(std::string_view text, std::size_t from, std::int64_t& value,
                    std::size_t& eol) {
    std::int64_t total = 0;
    std::size_t at = from;
    const std::size_t end = std::min(text.size(), from + 18);
    while (at < end && text[at] >= '0' && text[at] <= '9') {
        total = total * 10 + (text[at] - '0');
        ++at;
    }
    const std::size_t digits = at - from;
    if (digits == 0 || (text[from] == '0' && digits != 1) || at + 1 >= text.size() ||
        text[at] != '\r' || text[at + 1] != '\n') {
        return false;
    }
    value = total;
    eol = at;
    return true;
}

ParseResult parse_inline(std::string_view text) {
    auto newline = text.find('\n');
    if (newline == std::string_view::npos) {
        if (text.size() > k_max_inline) {
            return ProtocolError{"too big inline request"};
        }
        return NeedMore{};
    }
    if (newline > k_max_inline) {
        return ProtocolError{"too big inline request"};
    }
    std::string_view line = text.substr(0, newline);
    if (!line.empty() && line.back() == '\r') {
        line.remove_suffix(1);
    }
    Command command;
    command.consumed = newline + 1;
    // Quoted arguments keep their quotes' contents only when no escapes are
    // involved; arguments with escapes are rare in typed commands and are
    // rejected rather than misread.
    std::size_t i = 0;
    while (i < line.size()) {
        while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) {
            ++i;
        }
        if (i >= line.size()) {
            break;
        }
        if (line[i] == '"' || line[i] == '\'') {
            const char quote = line[i];
            const auto close = line.find(quote, i + 1);
            if (close == std::string_view::npos ||
                line.substr(i + 1, close - i - 1).find('\\') != std::string_view::npos) {
                return ProtocolError{"unbalanced quotes in request"};
            }
            if (close + 1 < line.size() && line[close + 1] != ' ' && line[close + 1] != '\t') {
                return ProtocolError{"unbalanced quotes in request"};
            }
            command.args.push_back(line.substr(i + 1, close - i - 1));
            i = close + 1;
            continue;
        }
        auto end = line.find_first_of(" \t", i);
        if (end == std::string_view::npos) {
            end = line.size();
        }
        command.args.push_back(line.substr(i, end - i));
        i = end;
    }
    return command;
}

// The arguments a previous parse checked (see Resume), found again from
// `pos` (just after the count line) into `args`: how many, or 0 (and `args`
// left empty) when `text` does not hold them as `resume` says.
std::int64_t find_arguments(std::string_view text, std::size_t pos, const Resume& resume,
                            std::vector<std::string_view>& args) {
    for (std::int64_t i = 0; i < resume.next; ++i) {
        std::int64_t length = 0;
        std::size_t eol = 0;
        if (pos >= text.size() || text[pos] != '$') {
            args.clear();
            return 0;
        }
        if (!quick_line_int(text, pos + 1, length, eol)) {
            eol = find_crlf(text, pos);
            if (eol == std::string_view::npos ||
                !parse_int(text.substr(pos + 1, eol - pos - 1), length) || length < 0) {
                args.clear();
                return 0;
            }
        }
        pos = eol + 2;
        if (text.size() - std::min(text.size(), pos) < std::size_t(length) + 2) {
            args.clear();
            return 0;
        }
        args.push_back(text.substr(pos, std::size_t(length)));
        pos += std::size_t(length) + 2;
    }
    if (pos != resume.pos) {
        args.clear();
        return 0;
    }
    return resume.next;
}

} // namespace

ParseResult parse_command(std::span<const std::byte> bytes, const Limits& limits,
                          std::vector<std::string_view> reuse, Resume* resume) {
    Resume resume_from;
    if (resume != nullptr) {
        resume_from = *resume;
        *resume = {}; // unless this parse ends wanting more, below
    }
    const std::string_view text = as_text(bytes);
    if (text.empty()) {
        return NeedMore{};
    }
    if (text.front() != '*') {
        return parse_inline(text);
    }

    std::int64_t count = 0;
    std::size_t eol = 0;
    if (!quick_line_int(text, 1, count, eol)) {
        eol = find_crlf(text, 0);
        if (eol == std::string_view::npos) {
            if (text.size() > k_max_inline) {
                return ProtocolError{"too big mbulk count string"};
            }
            return NeedMore{};
        }
        if (!parse_int(text.substr(1, eol - 1), count)) {
            return ProtocolError{"invalid multibulk length"};
        }
    }
    if (count > std::int64_t(k_max_multibulk)) {
        return ProtocolError{"invalid multibulk length"};
    }
    if (limits.unauthenticated && count > std::int64_t(k_max_unauthenticated_multibulk)) {
        return ProtocolError{"unauthenticated multibulk length"};
    }
    Command command;
    command.args = std::move(reuse);
    command.args.clear();
    std::size_t pos = eol + 2;
    if (count <= 0) {
        command.consumed = pos;
        return command;
    }
    // Reserve by what the buffer could hold, never by the claimed count:
    // each argument takes at least 6 bytes ("$0\r\n\r\n").
    command.args.reserve(std::min<std::size_t>(count, (text.size() - pos) / 6 + 1));
    // NeedMore asks for a lower bound of what the command still lacks (each
    // missing argument takes at least 6 bytes), so that the caller parses
    // again only once that much has arrived: a command of a million
    // arguments arriving in pieces costs a few parses, not one per read.
    // Argument `current`, which begins at `arg_start`, is the first not yet
    // whole: where a later parse resumes.
    std::int64_t current = 0;
    std::size_t arg_start = pos;
    const auto still_needed = [&](std::int64_t from, std::size_t at_least) {
        if (resume != nullptr) {
            *resume = Resume{count, current, arg_start};
        }
        const auto rest = static_cast<std::size_t>(count - from);
        return NeedMore{std::max<std::size_t>(1, at_least + rest * 6)};
    };
    const std::size_t first_arg = pos;
    if (resume_from.count == count && resume_from.next > 0 && resume_from.pos <= text.size()) {
        // Skip what a previous parse checked; its arguments are found again
        // once, when the command is whole.
        current = resume_from.next;
        pos = resume_from.pos;
    }
    const std::int64_t resumed_at = current;
    for (std::int64_t i = current; i < count; ++i) {
        current = i;
        arg_start = pos;
        if (pos >= text.size()) {
            return still_needed(i, 0);
        }
        if (text[pos] != '$') {
            return ProtocolError{fmt::format("expected '$', got '{}'", text[pos])};
        }
        std::int64_t length = 0;
        if (!quick_line_int(text, pos + 1, length, eol)) {
            eol = find_crlf(text, pos);
            if (eol == std::string_view::npos) {
                if (text.size() - pos > k_max_inline) {
                    return ProtocolError{"too big bulk count string"};
                }
                // "$<digits>" has arrived in part: the rest of this
                // argument's minimal 6 bytes, then the others'.
                return still_needed(i + 1, std::max<std::size_t>(
                                               1, 6 - std::min<std::size_t>(6, text.size() - pos)));
            }
            if (!parse_int(text.substr(pos + 1, eol - pos - 1), length)) {
                return ProtocolError{"invalid bulk length"};
            }
        }
        if (length < 0 || std::uint64_t(length) > limits.max_bulk) {
            return ProtocolError{"invalid bulk length"};
        }
        if (limits.unauthenticated && std::uint64_t(length) > k_max_unauthenticated_bulk) {
            return ProtocolError{"unauthenticated bulk length"};
        }
        if (std::uint64_t(length) > limits.max_value) {
            return TooLarge{std::size_t(i), std::uint64_t(length)};
        }
        pos = eol + 2;
        const auto need = pos + std::size_t(length) + 2;
        if (text.size() < need) {
            return still_needed(i + 1, need - text.size());
        }
        if (text.substr(pos + length, 2) != "\r\n") {
            return ProtocolError{"expected CRLF after bulk string"};
        }
        command.args.push_back(text.substr(pos, length));
        pos = need;
    }
    if (resumed_at > 0) {
        std::vector<std::string_view> earlier;
        if (find_arguments(text, first_arg, resume_from, earlier) != resumed_at) {
            // Not the command the state was left by (a caller's mistake):
            // parsed from its start instead.
            return parse_command(bytes, limits, std::move(command.args), nullptr);
        }
        command.args.insert(command.args.begin(), earlier.begin(), earlier.end());
    }
    command.consumed = pos;
    return command;
}

Writer& Writer::line(char type, std::string_view text) {
    // One append, not three: every SET's "+OK" comes here.
    const std::size_t at = m_out.size();
    m_out.resize(at + 1 + text.size() + 2);
    auto* out = reinterpret_cast<char*>(m_out.data() + at);
    out[0] = type;
    // A line ends at its first CR or LF: one inside (an error quoting a
    // client's argument) would end the reply early and make the rest read
    // as another reply, so it becomes a space, as in Redis.
    std::replace_copy_if(
        text.begin(), text.end(), out + 1, [](char c) { return c == '\r' || c == '\n'; }, ' ');
    out[1 + text.size()] = '\r';
    out[2 + text.size()] = '\n';
    return *this;
}

Writer& Writer::simple(std::string_view text) {
    return line('+', text);
}
Writer& Writer::error(std::string_view text) {
    return line('-', text);
}
Writer& Writer::number_line(char type, std::int64_t value) {
    char text[1 + 20 + 2]; // type, "-9223372036854775808", CRLF
    text[0] = type;
    const auto [end, error] = std::to_chars(text + 1, text + 21, value);
    (void)error; // 20 characters hold every int64
    end[0] = '\r';
    end[1] = '\n';
    const auto* bytes = reinterpret_cast<const std::byte*>(text);
    m_out.insert(m_out.end(), bytes, reinterpret_cast<const std::byte*>(end + 2));
    return *this;
}

Writer& Writer::integer(std::int64_t value) {
    return number_line(':', value);
}

Writer& Writer::bulk_header(std::size_t length) {
    return number_line('$', static_cast<std::int64_t>(length));
}
Writer& Writer::crlf() {
    ByteWriter(m_out).text("\r\n");
    return *this;
}

Writer& Writer::bulk(std::string_view bytes) {
    bulk_header(bytes.size());
    ByteWriter(m_out).text(bytes).text("\r\n");
    return *this;
}

Writer& Writer::null() {
    return m_version >= 3 ? line('_', "") : number_line('$', -1);
}

Writer& Writer::null_array() {
    if (m_version >= 3) {
        return line('_', "");
    }
    return line('*', "-1");
}

Writer& Writer::array(std::size_t count) {
    return number_line('*', static_cast<std::int64_t>(count));
}

Writer& Writer::map(std::size_t pairs) {
    if (m_version >= 3) {
        return number_line('%', static_cast<std::int64_t>(pairs));
    }
    return array(pairs * 2);
}

Writer& Writer::verbatim(std::string_view text) {
    if (m_version < 3) {
        return bulk(text);
    }
    number_line('=', static_cast<std::int64_t>(text.size() + 4));
    ByteWriter(m_out).text("txt:").text(text).text("\r\n");
    return *this;
}

std::string unknown_command_message(std::span<const std::string_view> args) {
    // As Redis 7's processCommand: up to 128 bytes of each, while the list of
    // arguments is shorter than 128 bytes.
    std::string listed;
    for (std::size_t i = 1; i < args.size() && listed.size() < 128; ++i) {
        listed += fmt::format("'{}' ", args[i].substr(0, 128 - listed.size()));
    }
    return fmt::format("ERR unknown command '{}', with args beginning with: {}",
                       args.empty() ? std::string_view() : args[0].substr(0, 128), listed);
}

} // namespace pt2cache::proto::resp
