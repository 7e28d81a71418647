// `gpubind doctor`: the report, its output, and running each group of checks
// in a child with a deadline. The checks themselves are in doctor_*.cpp.
#include "gpubind/doctor/doctor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <exception>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gpubind/util/error.hpp"
#include "gpubind/util/fd.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/process.hpp"

namespace gpubind::doctor {

namespace fs = std::filesystem;

std::string_view to_string(Verdict v) {
    switch (v) {
        case Verdict::Ok:
            return "ok";
        case Verdict::Warning:
            return "warning";
        case Verdict::Problem:
            return "problem";
    }
    return "problem";
}

int Report::count(Verdict v) const {
    int n = 0;
    for (const auto& c : checks) n += c.verdict == v ? 1 : 0;
    return n;
}

const Check* Report::find(std::string_view name) const {
    for (const auto& c : checks)
        if (c.name == name) return &c;
    return nullptr;
}

int exit_code(const Report& report) {
    return report.count(Verdict::Problem) > 0 ? kExitProblem : util::kExitOk;
}

namespace {

nlohmann::json check_json(const Check& c) {
    return {{"group", c.group},     {"name", c.name},         {"verdict", to_string(c.verdict)},
            {"summary", c.summary}, {"evidence", c.evidence}, {"fix", c.fix}};
}

Verdict verdict_of(std::string_view s) {
    if (s == "ok") return Verdict::Ok;
    if (s == "warning") return Verdict::Warning;
    return Verdict::Problem;
}

}  // namespace

void to_json(nlohmann::json& j, const Report& report) {
    nlohmann::json checks = nlohmann::json::array();
    for (const auto& c : report.checks) checks.push_back(check_json(c));
    j = {{"schema", kSchema},
         {"problems", report.count(Verdict::Problem)},
         {"warnings", report.count(Verdict::Warning)},
         {"checks", std::move(checks)}};
}

std::string format_text(const Report& report) {
    std::string out;
    for (const auto& c : report.checks) {
        out += fmt::format("[{}] {}/{}: {}\n", to_string(c.verdict), c.group, c.name, c.summary);
        for (const auto& e : c.evidence) out += "    " + e + "\n";
        if (!c.fix.empty()) out += "    fix: " + c.fix + "\n";
    }
    out += fmt::format("{} checks: {} ok, {} warnings, {} problems\n", report.checks.size(),
                       report.count(Verdict::Ok), report.count(Verdict::Warning),
                       report.count(Verdict::Problem));
    return out;
}

FileFact stat_path(const fs::path& path, bool follow) {
    FileFact f;
    struct stat st {};
    if ((follow ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) != 0) return f;
    f.mode = st.st_mode & 07777;
    f.uid = st.st_uid;
    if (S_ISLNK(st.st_mode)) {
        f.type = FileFact::Type::Symlink;
        char buf[4096];
        const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
        if (n > 0) f.link.assign(buf, static_cast<std::size_t>(n));
    } else if (S_ISREG(st.st_mode)) {
        f.type = FileFact::Type::Regular;
        f.executable = (st.st_mode & 0111) != 0;
    } else if (S_ISDIR(st.st_mode)) {
        f.type = FileFact::Type::Directory;
    } else if (S_ISCHR(st.st_mode)) {
        f.type = FileFact::Type::CharDevice;
        f.major = ::major(st.st_rdev);
        f.minor = ::minor(st.st_rdev);
    } else if (S_ISSOCK(st.st_mode)) {
        f.type = FileFact::Type::Socket;
    } else {
        f.type = FileFact::Type::Other;
    }
    return f;
}

std::string describe(const FileFact& f) {
    switch (f.type) {
        case FileFact::Type::Missing:
            return "missing";
        case FileFact::Type::Regular:
            return fmt::format("regular file, mode {:04o}{}", f.mode,
                               f.executable ? "" : ", not executable");
        case FileFact::Type::Directory:
            return "directory";
        case FileFact::Type::Symlink:
            return "symbolic link to " + f.link;
        case FileFact::Type::CharDevice:
            return fmt::format("character device {}:{}", f.major, f.minor);
        case FileFact::Type::Socket:
            return "socket";
        case FileFact::Type::Other:
            return "neither a file, a directory nor a character device";
    }
    return "?";
}

namespace {

// The most a group's encoded checks may take: more is a runaway child.
constexpr std::size_t kMaxAnswer = 16u << 20;

// The checks as the child writes them.
std::string encode(const std::vector<Check>& checks) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& c : checks) j.push_back(check_json(c));
    return j.dump();
}

std::vector<Check> decode(const std::string& text) {
    std::vector<Check> out;
    for (const auto& c : nlohmann::json::parse(text)) {
        Check check;
        check.group = c.at("group").get<std::string>();
        check.name = c.at("name").get<std::string>();
        check.verdict = verdict_of(c.at("verdict").get<std::string>());
        check.summary = c.at("summary").get<std::string>();
        check.evidence = c.at("evidence").get<std::vector<std::string>>();
        check.fix = c.at("fix").get<std::string>();
        out.push_back(std::move(check));
    }
    return out;
}

Check failed(const std::string& group, const std::string& why) {
    return {group,
            group,
            Verdict::Problem,
            "the " + group + " checks could not run: " + why,
            {},
            "run `gpubind doctor` again; if it persists, look at what it names"};
}

}  // namespace

std::vector<Check> run_bounded(const std::string& group,
                               const std::function<std::vector<Check>()>& fn,
                               std::chrono::milliseconds deadline) {
    const std::string what = "doctor's " + group + " checks";
    const util::ReportingChild child = util::fork_reporting(
        [&](int out) {
            std::string answer;
            try {
                answer = encode(fn());
            } catch (const std::exception& e) {
                answer = encode({failed(group, e.what())});
            } catch (...) {
                answer = encode({failed(group, "unknown error")});
            }
            const char* p = answer.data();
            std::size_t left = answer.size();
            while (left > 0) {
                const ssize_t n = ::write(out, p, left);
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0) return 1;
                p += n;
                left -= static_cast<std::size_t>(n);
            }
            return 0;
        },
        what);
    util::BoundedRead answer;
    try {
        answer = util::read_bounded(child.report.get(), kMaxAnswer, what,
                                    std::chrono::steady_clock::now() + deadline);
    } catch (const util::Error&) {
        answer.end = util::ReadEnd::TooLarge;  // a failed read: decoded below as no answer
    }
    if (answer.end == util::ReadEnd::Deadline) {
        ::kill(child.pid, SIGKILL);
        // A child stuck in the kernel (a hung mount) may not die at once: not waited for.
        ::waitpid(child.pid, nullptr, WNOHANG);
        return {failed(group, fmt::format("no answer within {} ms (a hung driver or mount?); "
                                          "what it was looking at is still stuck",
                                          deadline.count()))};
    }
    if (answer.end == util::ReadEnd::TooLarge) {
        util::kill_and_reap(child.pid);
        return {failed(group, "its child process died without an answer")};
    }
    util::reap(child.pid);
    try {
        return decode(answer.data);
    } catch (const std::exception&) {
        return {failed(group, "its child process died without an answer")};
    }
}

Report run(const config::Config& config, const Options& options) {
    Report report;
    auto add = [&](std::vector<Check> checks) {
        report.checks.insert(report.checks.end(), std::make_move_iterator(checks.begin()),
                             std::make_move_iterator(checks.end()));
    };
    add(check_gpubind(options.gpubind));
    if (options.container) {
        const ContainerOptions c = *options.container;
        add(run_bounded(
            "container", [&] { return check_container(gather_container(c, config)); },
            options.deadline));
        return report;
    }
    add(run_bounded(
        "node", [&] { return check_node(gather_node(config)); }, options.deadline));
    add(run_bounded(
        "gpubind", [&] { return check_state(gather_state(config)); }, options.deadline));
    add(run_bounded(
        "engines", [&] { return check_engines(gather_engines(options.engines)); },
        options.deadline));
    add(run_bounded(
        "cdi-specs", [&] { return check_cdi_specs(gather_cdi_specs(config, {})); },
        options.deadline));
    return report;
}

}  // namespace gpubind::doctor
