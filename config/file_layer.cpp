// SPDX-License-Identifier: MIT
//
// The TOML file layer.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <sys/stat.h>
#include <unistd.h>

#include "config/layers.hpp"
#include "config/values.hpp"

#include <fmt/core.h>
#include <toml++/toml.h>

namespace pt2cache::config {

namespace {

tl::unexpected<ConfigError> fail(std::string message) {
    return tl::make_unexpected(ConfigError{std::move(message)});
}

// How a TOML value was written, for error messages.
std::string describe(const toml::node& node) {
    if (auto text = node.as_string()) {
        return quote(text->get());
    }
    if (auto number = node.as_integer()) {
        return fmt::format("{}", number->get());
    }
    if (auto number = node.as_floating_point()) {
        return fmt::format("{}", number->get());
    }
    if (auto flag = node.as_boolean()) {
        return flag->get() ? "true" : "false";
    }
    if (node.is_array()) {
        return "an array";
    }
    if (node.is_table()) {
        return "a table";
    }
    return "a date or time";
}

std::string replace_newlines(std::string_view text) {
    std::string result(text);
    for (char& c : result) {
        if (c == '\n' || c == '\r') {
            c = ' ';
        }
    }
    return result;
}

// Converts a TOML value to the setting's type and checks it.
tl::expected<Value, std::string> convert(const Setting& setting, const toml::node& node) {
    auto got = [&](std::string_view expected) {
        return tl::make_unexpected(fmt::format("{}, got {}", expected, describe(node)));
    };
    switch (setting.kind) {
    case Kind::boolean:
        if (auto flag = node.as_boolean()) {
            return Value(flag->get());
        }
        return got("expected true or false");
    case Kind::integer:
        if (auto number = node.as_integer(); number && number->get() >= 0) {
            return check_value(setting, static_cast<std::uint64_t>(number->get()), describe(node));
        }
        return got(describe_integer_range(setting.min, setting.max));
    case Kind::size:
        if (auto number = node.as_integer(); number && number->get() >= 0) {
            return check_value(setting, static_cast<std::uint64_t>(number->get()), describe(node));
        }
        if (auto text = node.as_string()) {
            auto size = parse_size(text->get());
            if (!size) {
                return tl::make_unexpected(size.error());
            }
            return check_value(setting, *size, describe(node));
        }
        return got("expected a size like 10GiB or an integer number of bytes");
    case Kind::string:
    case Kind::choice:
        // A choice whose words include true and false (remote.cluster)
        // takes TOML's booleans too: `cluster = true` as the docs write it.
        if (auto flag = node.as_boolean()) {
            const std::string_view word = flag->get() ? "true" : "false";
            if (std::find(setting.choices.begin(), setting.choices.end(), word) !=
                setting.choices.end()) {
                return check_value(setting, std::string(word), describe(node));
            }
        }
        [[fallthrough]];
    case Kind::nonempty:
    case Kind::log_level:
    case Kind::redis_url:
    case Kind::listen_address:
        if (auto text = node.as_string()) {
            return check_value(setting, text->get(), describe(node));
        }
        return got("expected a string");
    }
    return got("expected a value");
}

// A configuration is a few hundred bytes; this is far beyond any real one.
constexpr std::size_t k_max_config_file = 1 << 20;

// toml++ nests one table per part of a dotted key or table header, and
// recursion over them overflowed the stack at about 50,000 parts (a 120 KB
// file crashed the daemon at start and on SIGHUP). Every setting has two
// parts ([section] name); this is far beyond any real file.
constexpr std::size_t k_max_key_parts = 16;

// The line of the first key or table header in `text` with more than
// k_max_key_parts parts: the dots outside strings and comments, in a run
// that '=', ',', brackets, braces and line ends delimit (a value's float or
// time has one).
std::optional<std::size_t> too_many_key_parts(std::string_view text) {
    std::size_t line = 1;
    std::size_t dots = 0;
    // Skips a string starting at text[i] (a quote); false if it never ends.
    const auto skip_string = [&](std::size_t& i) {
        const char quote = text[i];
        const bool multi_line =
            text.substr(i, 3) == std::string_view(quote == '"' ? "\"\"\"" : "'''");
        const std::string_view close = multi_line ? text.substr(i, 3) : text.substr(i, 1);
        for (i += close.size(); i < text.size(); ++i) {
            if (text[i] == '\n') {
                ++line;
                if (!multi_line) {
                    dots = 0;
                    return true; // a syntax error toml++ reports
                }
            } else if (text[i] == '\\' && quote == '"') {
                if (i + 1 < text.size() && text[i + 1] == '\n') {
                    ++line; // a line-ending backslash
                }
                ++i;
            } else if (text.substr(i, close.size()) == close) {
                i += close.size() - 1;
                // A multi-line string may end with one or two quotes of its
                // own before the closing three (""""x"""" is "x").
                for (int extra = 0;
                     multi_line && extra < 2 && i + 1 < text.size() && text[i + 1] == quote;
                     ++extra) {
                    ++i;
                }
                return true;
            }
        }
        return false;
    };
    for (std::size_t i = 0; i < text.size(); ++i) {
        switch (text[i]) {
        case '"':
        case '\'':
            if (!skip_string(i)) {
                return std::nullopt;
            }
            break;
        case '#':
            i = std::min(text.find('\n', i), text.size()) - 1;
            break;
        case '.':
            if (++dots >= k_max_key_parts) {
                return line;
            }
            break;
        case '\n':
            ++line;
            dots = 0;
            break;
        case '=':
        case ',':
        case '[':
        case ']':
        case '{':
        case '}':
            dots = 0;
            break;
        default:
            break;
        }
    }
    return std::nullopt;
}

tl::expected<std::string, ConfigError> read_text(const std::string& path) {
    // Without blocking: a FIFO would hold the daemon's start, or the loop
    // that reloads on SIGHUP, until someone wrote to it.
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        return fail(fmt::format("{}: cannot read the config file: {}", path, std::strerror(errno)));
    }
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        return fail(fmt::format("{}: cannot read the config file: {}", path, std::strerror(errno)));
    }
    if (S_ISDIR(st.st_mode)) {
        return fail(fmt::format("{}: cannot read the config file: it is a directory", path));
    }
    if (!S_ISREG(st.st_mode)) {
        return fail(fmt::format("{}: cannot read the config file: not a regular file (a FIFO, "
                                "socket or device)",
                                path));
    }
    // Read at most one byte past the limit, whatever the size said.
    std::string text(k_max_config_file + 1, '\0');
    std::size_t filled = 0;
    while (filled < text.size()) {
        const ssize_t got = ::read(fd, text.data() + filled, text.size() - filled);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got < 0) {
            return fail(
                fmt::format("{}: cannot read the config file: {}", path, std::strerror(errno)));
        }
        if (got == 0) {
            break;
        }
        filled += static_cast<std::size_t>(got);
    }
    text.resize(filled);
    if (text.size() > k_max_config_file) {
        return fail(
            fmt::format("{}: the config file is larger than {} bytes", path, k_max_config_file));
    }
    if (const auto line = too_many_key_parts(text)) {
        return fail(fmt::format("{}:{}: a key or table header of more than {} dotted parts (a "
                                "setting has two: [section] name)",
                                path, *line, k_max_key_parts));
    }
    return text;
}

} // namespace

tl::expected<Layer, ConfigError> read_file_layer(const std::string& path) {
    auto text = read_text(path);
    if (!text) {
        return tl::make_unexpected(text.error());
    }
    toml::table root;
    try {
        root = toml::parse(*text, path);
    } catch (const toml::parse_error& error) {
        const auto& begin = error.source().begin;
        return fail(fmt::format("{}:{}:{}: TOML syntax error: {}", path, begin.line, begin.column,
                                replace_newlines(error.description())));
    }

    Layer layer;
    Origin origin{Source::file, path};
    for (auto&& [section_key, section_node] : root) {
        std::string_view section = section_key.str();
        bool known = std::find(section_names().begin(), section_names().end(), section) !=
                     section_names().end();
        if (!known) {
            return fail(fmt::format("{}: {}: unknown section; the sections are {}", path, section,
                                    section_list()));
        }
        const toml::table* table = section_node.as_table();
        if (table == nullptr) {
            return fail(fmt::format("{}: {}: expected a table [{}], got {}", path, section, section,
                                    describe(section_node)));
        }
        for (auto&& [name, node] : *table) {
            std::string key = fmt::format("{}.{}", section, name.str());
            const Setting* setting = find_setting(key);
            if (setting == nullptr) {
                return fail(fmt::format("{}: {}: unknown key; [{}] accepts {}", path, key, section,
                                        keys_of_section(section)));
            }
            auto value = convert(*setting, node);
            if (!value) {
                return fail(error_prefix(origin, key) + value.error());
            }
            layer.push_back({setting, std::move(*value), origin});
        }
    }
    return layer;
}

} // namespace pt2cache::config
