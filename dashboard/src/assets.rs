//! The pages, built into the binary: vanilla HTML, CSS and JavaScript, no
//! library, nothing fetched at run time (clusters may be air-gapped).

/// The application page (the script draws every view into it).
pub const INDEX_HTML: &str = include_str!("../assets/index.html");
/// The sign-in page; `{{message}}` is replaced by an escaped message.
pub const SIGNIN_HTML: &str = include_str!("../assets/signin.html");
/// The script.
pub const APP_JS: &str = include_str!("../assets/app.js");
/// The styles.
pub const APP_CSS: &str = include_str!("../assets/app.css");

/// `text` safe inside HTML.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_escaped_and_pages_fetch_nothing_from_elsewhere() {
        assert_eq!(escape("<b>\"x\"&'"), "&lt;b&gt;&quot;x&quot;&amp;&#39;");
        for page in [INDEX_HTML, SIGNIN_HTML, APP_JS, APP_CSS] {
            // The SVG namespace is a name, not a fetch.
            let page = page.replace("http://www.w3.org/2000/svg", "");
            assert!(
                !page.contains("http://") && !page.contains("https://"),
                "a page names another origin"
            );
        }
        assert!(SIGNIN_HTML.contains("{{message}}"));
    }
}
