// SPDX-License-Identifier: MIT
#include "client/cli/archive_commands.hpp"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
#include <variant>

#include "client/cli/common.hpp"
#include "client/cxx/process.hpp"
#include "proto/archive.hpp"
#include "proto/messages.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace pt2cache::client::cli {

namespace {

namespace archive = proto::archive;
using Clock = std::chrono::steady_clock;

// Archive bytes are written out once this many are pending, and read in
// chunks of this size.
constexpr std::size_t k_io_chunk = 1u << 20;
constexpr std::uint32_t k_scan_page = 1000;

std::uint64_t now_ms() {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
}

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// The archive's destination: stdout, or a temporary file renamed into place
// by commit() (so that FILE is never a half-written archive).
class Output {
public:
    explicit Output(std::string path)
        : m_path(std::move(path)) {}
    ~Output() {
        if (m_fd >= 0 && m_fd != STDOUT_FILENO) {
            ::close(m_fd);
            ::unlink(m_temp.c_str());
        }
    }
    Output(const Output&) = delete;
    Output& operator=(const Output&) = delete;

    tl::expected<void, std::string> open() {
        if (m_path == "-") {
            if (::isatty(STDOUT_FILENO) != 0) {
                return tl::unexpected(std::string(
                    "refusing to write an archive to a terminal: use -o FILE or a pipe"));
            }
            m_fd = STDOUT_FILENO;
            return {};
        }
        m_temp = fmt::format("{}.tmp.{}", m_path, ::getpid());
        m_fd = ::open(m_temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (m_fd < 0) {
            return tl::unexpected(
                fmt::format("cannot create {}: {}", m_temp, std::strerror(errno)));
        }
        return {};
    }

    const std::string& name() const {
        static const std::string stdout_name = "standard output";
        return m_path == "-" ? stdout_name : m_path;
    }

    tl::expected<void, std::string> write(std::span<const std::byte> data) {
        if (const int error = cxx::write_all(m_fd, data)) {
            return tl::unexpected(fmt::format("cannot write {}: {}", name(), std::strerror(error)));
        }
        return {};
    }

    tl::expected<void, std::string> commit() {
        if (m_fd == STDOUT_FILENO) {
            return {};
        }
        const int fd = m_fd;
        m_fd = -1;
        if (::fsync(fd) != 0 || ::close(fd) != 0) {
            ::unlink(m_temp.c_str());
            return tl::unexpected(fmt::format("cannot write {}: {}", m_path, std::strerror(errno)));
        }
        if (::rename(m_temp.c_str(), m_path.c_str()) != 0) {
            ::unlink(m_temp.c_str());
            return tl::unexpected(
                fmt::format("cannot rename {} to {}: {}", m_temp, m_path, std::strerror(errno)));
        }
        return {};
    }

private:
    std::string m_path;
    std::string m_temp;
    int m_fd = -1;
};

std::string ns_problem(const std::string& ns) {
    return proto::valid_namespace(ns)
               ? std::string()
               : fmt::format("invalid namespace \"{}\": expected 1 to {} characters of [a-z0-9-]",
                             ns, proto::k_max_namespace);
}

} // namespace

std::optional<std::uint64_t> parse_duration_ms(std::string_view text) {
    if (text.empty()) {
        return std::nullopt;
    }
    std::uint64_t unit_s = 1;
    switch (text.back()) {
    case 's':
        text.remove_suffix(1);
        break;
    case 'm':
        unit_s = 60;
        text.remove_suffix(1);
        break;
    case 'h':
        unit_s = 3600;
        text.remove_suffix(1);
        break;
    case 'd':
        unit_s = 86400;
        text.remove_suffix(1);
        break;
    case 'w':
        unit_s = 7 * 86400;
        text.remove_suffix(1);
        break;
    default:
        break;
    }
    if (text.empty() || text.size() > 9) {
        return std::nullopt;
    }
    std::uint64_t count = 0;
    for (const char c : text) {
        if (c < '0' || c > '9') {
            return std::nullopt;
        }
        count = count * 10 + static_cast<std::uint64_t>(c - '0');
    }
    return count * unit_s * 1000;
}

int run_export(const Globals& globals, const ArchiveArgs& args) {
    std::uint64_t since_ms = 0;
    if (!args.since.empty()) {
        const auto age = parse_duration_ms(args.since);
        if (!age) {
            complain(fmt::format("--since {}: expected a duration such as 90s, 30m, 12h, 7d or 2w",
                                 args.since));
            return exit_status::usage;
        }
        since_ms = now_ms() > *age ? now_ms() - *age : 1;
    }
    Output output(args.output);
    if (auto opened = output.open(); !opened) {
        complain(opened.error());
        return exit_status::usage;
    }
    const auto start = Clock::now();
    auto client = make_client(globals);
    archive::Writer writer(args.level);
    std::vector<std::byte> out;
    writer.begin(out);
    std::uint64_t vanished = 0;
    std::string cursor;
    do {
        auto page = client.scan(cursor, k_scan_page, since_ms, args.namespaces);
        if (!page) {
            return report(page.error());
        }
        for (const auto& listed : page->entries) {
            auto entry = client.dump(listed.ns, listed.key);
            if (!entry) {
                return report(entry.error());
            }
            if (!*entry) {
                ++vanished; // removed or expired since the page was listed
                continue;
            }
            const auto& dumped = **entry;
            auto added = writer.add(
                {listed.ns, listed.key, dumped.created_ms, dumped.expires_ms, dumped.value}, out);
            if (!added) {
                complain(fmt::format("cannot archive \"{}\" in {}: {}", listed.key, listed.ns,
                                     added.error()));
                return exit_status::server;
            }
            if (out.size() >= k_io_chunk) {
                if (auto wrote = output.write(out); !wrote) {
                    complain(wrote.error());
                    return exit_status::usage;
                }
                out.clear();
            }
        }
        cursor = std::move(page->next_cursor);
    } while (!cursor.empty());
    auto summary = writer.finish(out);
    if (!summary) {
        complain(summary.error());
        return exit_status::server;
    }
    if (auto wrote = output.write(out); !wrote) {
        complain(wrote.error());
        return exit_status::usage;
    }
    if (auto committed = output.commit(); !committed) {
        complain(committed.error());
        return exit_status::usage;
    }
    fmt::print(stderr, "exported {} entries ({} bytes of values) to {} in {:.2f} s{}\n",
               summary->entries, summary->value_bytes, output.name(), seconds_since(start),
               vanished > 0 ? fmt::format("; {} removed while exporting", vanished) : "");
    return exit_status::ok;
}

int run_import(const Globals& globals, const ArchiveArgs& args) {
    const bool from_stdin = args.input == "-";
    const std::string name = from_stdin ? std::string("standard input") : args.input;
    const int fd = from_stdin ? STDIN_FILENO : ::open(args.input.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        complain(fmt::format("cannot open {}: {}", name, std::strerror(errno)));
        return exit_status::usage;
    }
    struct Closer {
        int fd;
        ~Closer() {
            if (fd != STDIN_FILENO) {
                ::close(fd);
            }
        }
    } closer{fd};
    const auto start = Clock::now();
    auto client = make_client(globals);
    if (auto connected = client.connect(); !connected) {
        return report(connected.error());
    }
    archive::Reader reader(client.max_value());
    std::vector<std::byte> chunk(k_io_chunk);
    std::uint64_t imported = 0;
    std::uint64_t skipped = 0;
    std::uint64_t expired = 0;
    std::uint64_t bytes = 0;
    const auto counts = [&] {
        return fmt::format("imported {} entries ({} bytes of values), skipped {} already present "
                           "and at least as recent, {} expired",
                           imported, bytes, skipped, expired);
    };
    for (;;) {
        auto next = reader.next();
        if (std::holds_alternative<archive::Reader::NeedInput>(next)) {
            const ssize_t got = ::read(fd, chunk.data(), chunk.size());
            if (got < 0 && errno == EINTR) {
                continue;
            }
            if (got < 0) {
                complain(
                    fmt::format("cannot read {}: {}; {}", name, std::strerror(errno), counts()));
                return exit_status::usage;
            }
            if (got == 0) {
                reader.end_of_input();
            } else {
                reader.feed(std::span(chunk).first(static_cast<std::size_t>(got)));
            }
            continue;
        }
        if (auto* damage = std::get_if<archive::Damage>(&next)) {
            fmt::print("{}\n", counts());
            complain(fmt::format("{} is damaged at {}; nothing after it was imported", name,
                                 damage->describe()));
            return exit_status::usage;
        }
        if (std::holds_alternative<archive::Summary>(next)) {
            break;
        }
        const auto& entry = std::get<archive::Entry>(next);
        if (entry.expires_ms != 0 && entry.expires_ms <= now_ms()) {
            ++expired;
            continue;
        }
        auto stored = client.restore(entry.ns, entry.key, entry.created_ms, entry.expires_ms,
                                     entry.value, args.overwrite);
        if (!stored) {
            fmt::print("{}\n", counts());
            return report(stored.error());
        }
        if (*stored) {
            ++imported;
            bytes += entry.value.size();
        } else {
            ++skipped;
        }
    }
    fmt::print("{} from {} in {:.2f} s\n", counts(), name, seconds_since(start));
    return exit_status::ok;
}

void add_archive_commands(CLI::App& app, ArchiveCommands& commands) {
    auto& args = commands.args;
    auto* exp = app.add_subcommand(
        "export",
        "Write the disk cache's entries as an archive (docs/archive.md) to stdout or FILE");
    exp->add_option("--ns", args.namespaces, "Only this namespace (repeatable; default: all)")
        ->type_name("NS")
        ->check(CLI::Validator(ns_problem, ""));
    exp->add_option("--since", args.since,
                    "Only entries stored within DURATION (90s, 30m, 12h, 7d, 2w)")
        ->type_name("DURATION");
    exp->add_option("-o,--output", args.output, "Archive file; - (the default): stdout")
        ->type_name("FILE");
    exp->add_option("--level", args.level, "zstd compression level (default 3)")
        ->check(CLI::Range(1, 19));
    commands.export_command = exp;

    auto* imp = app.add_subcommand(
        "import", "Store the entries of an archive; entries already present and as recent are "
                  "kept");
    imp->add_option("FILE", args.input, "Archive file; -: stdin")->required();
    imp->add_flag("--overwrite", args.overwrite, "Replace entries even when they are newer");
    commands.import_command = imp;
}

std::optional<int> ArchiveCommands::run(const Globals& globals) const {
    if (export_command != nullptr && export_command->parsed()) {
        return run_export(globals, args);
    }
    if (import_command != nullptr && import_command->parsed()) {
        return run_import(globals, args);
    }
    return std::nullopt;
}

} // namespace pt2cache::client::cli
