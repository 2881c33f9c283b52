/*
 * site_pages: the account site's templates and style (see site_pages.h).
 *
 * The pages share a head, a header and the alert lines, pasted together by
 * string literal concatenation, so each page is still one constant the
 * tests can check with html_check. Design notes: one column at most 34rem
 * wide, the system font stack, 16px text (so phones do not zoom into
 * inputs), tap targets at least 44px high, visible focus rings, a dark
 * scheme following the system's, every input with a <label>.
 */
#include "site/site_pages.h"

#include <assert.h>

/* The templates are laid out as the HTML they make. */
/* clang-format off */

#define SITE_CSS \
    ":root{color-scheme:light dark;--fg:#1b1d21;--bg:#f4f5f7;--card:#fff;--muted:#596270;" \
    "--line:#d3d8df;--accent:#1d5bbf;--accent-fg:#fff;--err-bg:#fdeaea;--err:#8b1515;" \
    "--ok-bg:#e6f4ea;--ok:#14532d}\n" \
    "@media (prefers-color-scheme:dark){:root{--fg:#e6e8eb;--bg:#15171b;--card:#1e2126;" \
    "--muted:#a3abb7;--line:#3a404a;--accent:#79a6ff;--accent-fg:#0b1020;--err-bg:#3d1818;" \
    "--err:#ffb8b8;--ok-bg:#153020;--ok:#a9e4bb}}\n" \
    "*{box-sizing:border-box}\n" \
    "body{margin:0;background:var(--bg);color:var(--fg);" \
    "font:16px/1.5 system-ui,-apple-system,\"Segoe UI\",Roboto,\"Helvetica Neue\",Arial," \
    "sans-serif;-webkit-text-size-adjust:100%}\n" \
    ".bar{border-bottom:1px solid var(--line);background:var(--card)}\n" \
    ".bar a{display:block;max-width:34rem;margin:0 auto;padding:.8rem 1rem;font-weight:700;" \
    "color:var(--fg);text-decoration:none}\n" \
    "main{max-width:34rem;margin:0 auto;padding:1.5rem 1rem 3rem}\n" \
    "h1{font-size:1.6rem;line-height:1.25;margin:0 0 1rem}\n" \
    "h2{font-size:1.15rem;margin:0 0 .75rem}\n" \
    "h3{font-size:1rem;margin:1.25rem 0 .5rem}\n" \
    ".card{background:var(--card);border:1px solid var(--line);border-radius:12px;" \
    "padding:1.25rem;margin:0 0 1.25rem}\n" \
    "label{display:block;font-weight:600;margin:1rem 0 .3rem}\n" \
    "label:first-of-type{margin-top:0}\n" \
    "input[type=text],input[type=password]{display:block;width:100%;min-height:44px;" \
    "padding:.6rem .75rem;font:inherit;color:inherit;background:var(--bg);" \
    "border:1px solid var(--line);border-radius:8px}\n" \
    "button{min-height:44px;padding:.6rem 1.1rem;font:inherit;font-weight:600;cursor:pointer;" \
    "border:2px solid var(--accent);border-radius:8px;background:var(--accent);" \
    "color:var(--accent-fg)}\n" \
    "button.secondary{background:transparent;color:var(--accent)}\n" \
    "button.danger{background:transparent;border-color:var(--err);color:var(--err)}\n" \
    ":focus-visible{outline:3px solid var(--accent);outline-offset:2px}\n" \
    "form{margin:0}\n" \
    ".actions{display:flex;flex-wrap:wrap;gap:.75rem;align-items:center;margin-top:1.25rem}\n" \
    ".alert{padding:.75rem 1rem;border-radius:8px;margin:0 0 1rem}\n" \
    ".error{background:var(--err-bg);color:var(--err)}\n" \
    ".notice{background:var(--ok-bg);color:var(--ok)}\n" \
    ".hint,.alt{color:var(--muted)}\n" \
    ".hint{font-size:.9rem;margin:.3rem 0 0}\n" \
    "a{color:var(--accent)}\n" \
    "dl{display:grid;grid-template-columns:auto 1fr;gap:.3rem 1rem;margin:0}\n" \
    "dt{color:var(--muted)}\n" \
    "dd{margin:0;overflow-wrap:anywhere}\n" \
    "code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.9rem}\n" \
    ".key{display:block;padding:.75rem;background:var(--bg);border:1px dashed var(--line);" \
    "border-radius:8px;overflow-wrap:anywhere;user-select:all}\n" \
    "pre{margin:0;padding:.75rem;background:var(--bg);border:1px solid var(--line);" \
    "border-radius:8px;white-space:pre-wrap;overflow-wrap:anywhere}\n" \
    ".signout{text-align:right}\n"

/* Copies the key: the async clipboard API where the page is a secure
 * context, else (plain http to a remote host) the selection and
 * execCommand, leaving the key selected for a manual copy if even that
 * fails. */
#define SITE_COPY_SCRIPT \
    "(function(){var b=document.getElementById('copy'),k=document.getElementById('api-key')," \
    "s=document.getElementById('copy-status');" \
    "function select(){var r=document.createRange();r.selectNodeContents(k);" \
    "var w=window.getSelection();w.removeAllRanges();w.addRange(r);}" \
    "function fallback(){select();var ok=false;try{ok=document.execCommand('copy');}catch(e){}" \
    "s.textContent=ok?'Copied.':'The key is selected: copy it with your keyboard or menu.';}" \
    "b.addEventListener('click',function(){" \
    "if(navigator.clipboard&&window.isSecureContext){" \
    "navigator.clipboard.writeText(k.textContent).then(function(){s.textContent='Copied.';}," \
    "fallback);}else{fallback();}});})();"

const char site_css[] = SITE_CSS;
const char site_copy_script[] = SITE_COPY_SCRIPT;

#define HEAD(title) \
    "<!doctype html>\n" \
    "<html lang=\"en\">\n" \
    "<head>\n" \
    "<meta charset=\"utf-8\">\n" \
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n" \
    "<meta name=\"color-scheme\" content=\"light dark\">\n" \
    "<link rel=\"icon\" href=\"data:,\">\n" \
    "<title>" title " · eventd</title>\n" \
    "<style>" SITE_CSS "</style>\n" \
    "</head>\n" \
    "<body>\n" \
    "<header class=\"bar\"><a href=\"{{base}}/user/api\">eventd accounts</a></header>\n" \
    "<main>\n"

#define ALERTS \
    "{{#error}}<p class=\"alert error\" role=\"alert\">{{error}}</p>\n{{/error}}" \
    "{{#notice}}<p class=\"alert notice\" role=\"status\">{{notice}}</p>\n{{/notice}}"

#define FOOT \
    "</main>\n" \
    "</body>\n" \
    "</html>\n"

#define CSRF "<input type=\"hidden\" name=\"csrf\" value=\"{{csrf}}\">\n"

#define USERNAME_INPUT(more) \
    "<label for=\"username\">Username</label>\n" \
    "<input id=\"username\" name=\"username\" type=\"text\" value=\"{{username}}\" " \
    "autocomplete=\"username\" autocapitalize=\"none\" autocorrect=\"off\" spellcheck=\"false\" " \
    "maxlength=\"64\" required" more ">\n"

static const char register_tpl[] =
    HEAD("Create an account")
    "<h1>Create an account</h1>\n"
    ALERTS
    "<form class=\"card\" method=\"post\" action=\"{{base}}/register\">\n"
    CSRF
    USERNAME_INPUT(" pattern=\"[A-Za-z0-9._\\-]{1,64}\" aria-describedby=\"username-hint\"")
    "<p class=\"hint\" id=\"username-hint\">1 to 64 letters, digits, '.', '_' or '-'.</p>\n"
    "<label for=\"password\">Password</label>\n"
    "<input id=\"password\" name=\"password\" type=\"password\" autocomplete=\"new-password\" "
    "required{{#password_min}} minlength=\"{{password_min}}\" "
    "aria-describedby=\"password-hint\"{{/password_min}}>\n"
    "{{#password_min}}"
    "<p class=\"hint\" id=\"password-hint\">At least {{password_min}} characters; not your "
    "username or a common password.</p>\n"
    "{{/password_min}}"
    "<label for=\"password_confirm\">Repeat the password</label>\n"
    "<input id=\"password_confirm\" name=\"password_confirm\" type=\"password\" "
    "autocomplete=\"new-password\" required>\n"
    "<div class=\"actions\"><button type=\"submit\">Create account</button></div>\n"
    "</form>\n"
    "<p class=\"alt\">Already have an account? <a href=\"{{base}}/signin\">Sign in</a></p>\n"
    FOOT;

static const char signin_tpl[] =
    HEAD("Sign in")
    "<h1>Sign in</h1>\n"
    ALERTS
    "<form class=\"card\" method=\"post\" action=\"{{base}}/signin\">\n"
    CSRF
    USERNAME_INPUT("")
    "<label for=\"password\">Password</label>\n"
    "<input id=\"password\" name=\"password\" type=\"password\" "
    "autocomplete=\"current-password\" required>\n"
    "<div class=\"actions\"><button type=\"submit\">Sign in</button></div>\n"
    "</form>\n"
    "<p class=\"alt\">No account yet? <a href=\"{{base}}/register\">Create one</a></p>\n"
    FOOT;

static const char user_api_tpl[] =
    HEAD("API access")
    "<h1>API access</h1>\n"
    ALERTS
    "<section class=\"card\" aria-labelledby=\"account-title\">\n"
    "<h2 id=\"account-title\">Your account</h2>\n"
    "<dl><dt>Username</dt><dd id=\"username\">{{username}}</dd>"
    "<dt>UserID</dt><dd id=\"user-id\">{{user_id}}</dd></dl>\n"
    "</section>\n"
    "{{#api_key}}"
    "<section class=\"card\" aria-labelledby=\"key-title\">\n"
    "<h2 id=\"key-title\">Your new API key</h2>\n"
    "<p><strong>It is shown only once.</strong> Copy it now and keep it secret: it cannot be "
    "shown again. If you lose it, issue a new one.</p>\n"
    "<code id=\"api-key\" class=\"key\">{{api_key}}</code>\n"
    "<div class=\"actions\"><button type=\"button\" id=\"copy\" class=\"secondary\">"
    "Copy the key</button><span id=\"copy-status\" role=\"status\"></span></div>\n"
    "<h3>Try it</h3>\n"
    "<pre id=\"curl\">curl -u {{username}}:{{api_key}} -H 'Content-Type: application/json' "
    "-d '{\"Theme\":{\"Name\":\"My theme\"}}' {{api_url}}/theme</pre>\n"
    "</section>\n"
    "<script>" SITE_COPY_SCRIPT "</script>\n"
    "{{/api_key}}"
    "<section class=\"card\" aria-labelledby=\"manage-title\">\n"
    "<h2 id=\"manage-title\">API key</h2>\n"
    "{{#has_key}}<p>You have an API key. A new one replaces it: the current key stops working "
    "at once.</p>\n{{/has_key}}"
    "{{^has_key}}<p>You have no API key yet.</p>\n{{/has_key}}"
    "<div class=\"actions\">\n"
    "<form method=\"post\" action=\"{{base}}/user/api/key\">\n"
    CSRF
    "<button type=\"submit\">Issue a new API key</button>\n"
    "</form>\n"
    "{{#has_key}}"
    "<form method=\"post\" action=\"{{base}}/user/api/revoke\">\n"
    CSRF
    "<button type=\"submit\" class=\"danger\">Revoke the current key</button>\n"
    "</form>\n"
    "{{/has_key}}"
    "</div>\n"
    "</section>\n"
    "<section class=\"card\" aria-labelledby=\"security-title\">\n"
    "<h2 id=\"security-title\">Password and sessions</h2>\n"
    "<p><a href=\"{{base}}/user/password\">Change your password</a> (this signs out every "
    "other browser and revokes your API key).</p>\n"
    "<form method=\"post\" action=\"{{base}}/signout/all\">\n"
    CSRF
    "<button type=\"submit\" class=\"danger\">Sign out everywhere</button> "
    "<span class=\"hint\">every browser, and your API key is revoked</span>\n"
    "</form>\n"
    "</section>\n"
    "<form class=\"signout\" method=\"post\" action=\"{{base}}/signout\">\n"
    CSRF
    "<button type=\"submit\" class=\"secondary\">Sign out</button>\n"
    "</form>\n"
    FOOT;

static const char password_tpl[] =
    HEAD("Change your password")
    "<h1>Change your password</h1>\n"
    ALERTS
    "<form class=\"card\" method=\"post\" action=\"{{base}}/user/password\">\n"
    CSRF
    "<input type=\"hidden\" name=\"username\" value=\"{{username}}\" autocomplete=\"username\">\n"
    "<p>Signed in as <strong>{{username}}</strong>. Every other browser signed in to this "
    "account is signed out when the password changes.</p>\n"
    "<label for=\"current_password\">Current password</label>\n"
    "<input id=\"current_password\" name=\"current_password\" type=\"password\" "
    "autocomplete=\"current-password\" required>\n"
    "<label for=\"password\">New password</label>\n"
    "<input id=\"password\" name=\"password\" type=\"password\" autocomplete=\"new-password\" "
    "required{{#password_min}} minlength=\"{{password_min}}\" "
    "aria-describedby=\"password-hint\"{{/password_min}}>\n"
    "{{#password_min}}"
    "<p class=\"hint\" id=\"password-hint\">At least {{password_min}} characters; not your "
    "username or a common password.</p>\n"
    "{{/password_min}}"
    "<label for=\"password_confirm\">Repeat the new password</label>\n"
    "<input id=\"password_confirm\" name=\"password_confirm\" type=\"password\" "
    "autocomplete=\"new-password\" required>\n"
    "<div class=\"actions\"><button type=\"submit\">Change the password</button>"
    "<a href=\"{{base}}/user/api\">Cancel</a></div>\n"
    "</form>\n"
    FOOT;

static const char message_tpl[] =
    HEAD("{{title}}")
    "<h1>{{title}}</h1>\n"
    ALERTS
    "{{#message}}<div class=\"card\"><p>{{message}}</p></div>\n{{/message}}"
    "<p class=\"alt\"><a href=\"{{base}}/signin\">Sign in</a> · "
    "<a href=\"{{base}}/register\">Create an account</a></p>\n"
    FOOT;

/* clang-format on */

static const char *const register_vars[] = {"base",   "csrf",     "error",
                                            "notice", "username", "password_min"};
static const char *const signin_vars[] = {"base", "csrf", "error", "notice", "username"};
static const char *const user_api_vars[] = {"base",    "csrf",    "error",   "notice", "username",
                                            "user_id", "api_key", "api_url", "has_key"};
static const char *const message_vars[] = {"base", "error", "notice", "title", "message"};
static const char *const password_vars[] = {"base",   "csrf",     "error",
                                            "notice", "username", "password_min"};

#define PAGE(name, tpl, vars)                                                                      \
    { name, tpl, vars, sizeof(vars) / sizeof((vars)[0]) }

const struct site_page_def site_pages[SITE_PAGE_COUNT] = {
    [SITE_REGISTER] = PAGE("register", register_tpl, register_vars),
    [SITE_SIGNIN] = PAGE("signin", signin_tpl, signin_vars),
    [SITE_USER_API] = PAGE("user_api", user_api_tpl, user_api_vars),
    [SITE_MESSAGE] = PAGE("message", message_tpl, message_vars),
    [SITE_PASSWORD] = PAGE("password", password_tpl, password_vars),
};

void site_page_render(struct buf *out, enum site_page page, const struct html_var *vars,
                      size_t nvars) {
    assert(page < SITE_PAGE_COUNT);
    html_render(out, site_pages[page].tpl, vars, nvars);
}
